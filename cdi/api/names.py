"""Every CDI name the controller, webhooks and tools share (cdi-facts §1, §2, §5.11).

KubeVirt, virtctl and users' manifests match these strings literally, so they are spelled once, here.
Importer env var names are not here: :mod:`importer.contract` owns them.
"""

from __future__ import annotations

import datetime

from importer.contract import CONTENT_ARCHIVE, CONTENT_KUBEVIRT

GROUP = "cdi.kubevirt.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
UPLOAD_GROUP = "upload.cdi.kubevirt.io"
UPLOAD_API_VERSION = f"{UPLOAD_GROUP}/{VERSION}"

# Kinds and plurals (§1.1).
DATAVOLUME = "DataVolume"
DATAVOLUMES = "datavolumes"
DATASOURCE = "DataSource"
DATASOURCES = "datasources"
DATAIMPORTCRON = "DataImportCron"
DATAIMPORTCRONS = "dataimportcrons"
STORAGEPROFILE = "StorageProfile"
STORAGEPROFILES = "storageprofiles"
CDICONFIG = "CDIConfig"
CDICONFIGS = "cdiconfigs"
CDI = "CDI"
CDIS = "cdis"
VOLUME_IMPORT_SOURCE = "VolumeImportSource"
VOLUME_UPLOAD_SOURCE = "VolumeUploadSource"
VOLUME_CLONE_SOURCE = "VolumeCloneSource"
CDICONFIG_NAME = "config"  # the singleton KubeVirt reads (§9.1)
# The aggregated upload API (§4.4): nothing is stored, a create answers with status.token.
UPLOAD_TOKEN_REQUEST = "UploadTokenRequest"
UPLOAD_TOKEN_REQUESTS = "uploadtokenrequests"
UPLOAD_APISERVICE = f"{VERSION}.{UPLOAD_GROUP}"

# DataVolume phases (§1.7), exact strings.
PHASE_UNSET = ""
PENDING = "Pending"
PVC_BOUND = "PVCBound"
IMPORT_SCHEDULED = "ImportScheduled"
IMPORT_IN_PROGRESS = "ImportInProgress"
UPLOAD_SCHEDULED = "UploadScheduled"
UPLOAD_READY = "UploadReady"
CLONE_SCHEDULED = "CloneScheduled"
CLONE_IN_PROGRESS = "CloneInProgress"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
PENDING_POPULATION = "PendingPopulation"
SUCCEEDED = "Succeeded"
FAILED = "Failed"
UNKNOWN = "Unknown"
PAUSED = "Paused"
PHASES = (
    PHASE_UNSET, PENDING, PVC_BOUND, IMPORT_SCHEDULED, IMPORT_IN_PROGRESS, CLONE_SCHEDULED, CLONE_IN_PROGRESS,
    "SnapshotForSmartCloneInProgress", "CloneFromSnapshotSourceInProgress", "SmartClonePVCInProgress",
    "CSICloneInProgress", "ExpansionInProgress", "NamespaceTransferInProgress", UPLOAD_SCHEDULED, UPLOAD_READY,
    WAIT_FOR_FIRST_CONSUMER, PENDING_POPULATION, SUCCEEDED, FAILED, UNKNOWN, PAUSED, "PrepClaimInProgress",
    "RebindInProgress",
)

# Progress strings (§1.7): "%.2f%%" while running, exactly "100.0%" on success.
PROGRESS_UNKNOWN = "N/A"
PROGRESS_DONE = "100.0%"

# Condition types, reasons and messages (§1.7).
CONDITION_BOUND = "Bound"
CONDITION_READY = "Ready"
CONDITION_RUNNING = "Running"
REASON_BOUND = "Bound"
REASON_PENDING = "Pending"
REASON_NOT_FOUND = "NotFound"
REASON_CLAIM_LOST = "ClaimLost"
REASON_TRANSFER_RUNNING = "TransferRunning"
REASON_POD_RUNNING = "Pod is running"
REASON_COMPLETED = "Completed"
REASON_ERROR = "Error"
REASON_IMAGE_PULL_FAILED = "ImagePullFailed"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_CHECKSUM_ERROR = "ChecksumError"
REASON_ERR_STARTING_POD = "ErrStartingPod"
MESSAGE_NO_PVC = "No PVC found"
MESSAGE_CLAIM_LOST = "Claim Lost"
MESSAGE_UNSCHEDULABLE = "Importer pod cannot be scheduled"
MESSAGE_TOO_SMALL = "DataVolume too small to contain image"

# Event reasons (§5.11). DV events:
EVENT_IMPORT_SCHEDULED = "ImportScheduled"
EVENT_IMPORT_IN_PROGRESS = "ImportInProgress"
EVENT_IMPORT_FAILED = "ImportFailed"
EVENT_IMPORT_SUCCEEDED = "ImportSucceeded"
EVENT_UPLOAD_SCHEDULED = "UploadScheduled"
EVENT_UPLOAD_READY = "UploadReady"
EVENT_UPLOAD_FAILED = "UploadFailed"
EVENT_UPLOAD_SUCCEEDED = "UploadSucceeded"
EVENT_ERR_CLAIM_LOST = "ErrClaimLost"
EVENT_ERR_RESOURCE_EXISTS = "ErrResourceExists"
EVENT_ERR_RESOURCE_MARKED_FOR_DELETION = "ErrResourceMarkedForDeletion"
EVENT_ERR_CLAIM_NOT_VALID = "ErrClaimNotValid"
EVENT_ERR_EXCEEDED_QUOTA = "ErrExceededQuota"
# PVC events:
EVENT_ERR_IMPORT_FAILED = "ErrImportFailed"
EVENT_PVC_IMPORT_SUCCEEDED = "ImportSucceeded"
EVENT_IMPORT_TARGET_IN_USE = "ImportTargetInUse"
EVENT_PVC_UPLOAD_SUCCEEDED = "UploadSucceeded"  # message "Upload Successful"
EVENT_ERR_STARTING_POD = "ErrStartingPod"

# Annotations (§2.1). Keys are literal; the prefix only saves typing.
_A = GROUP + "/"
ANN_ENDPOINT = _A + "storage.import.endpoint"
ANN_SOURCE = _A + "storage.import.source"
ANN_CONTENT_TYPE = _A + "storage.contentType"
ANN_SECRET = _A + "storage.import.secretName"
ANN_CERT_CONFIGMAP = _A + "storage.import.certConfigMap"
ANN_INSECURE_SKIP_VERIFY = _A + "storage.import.insecureSkipVerify"
ANN_CHECKSUM = _A + "storage.import.checksum"
ANN_EXTRA_HEADERS_PREFIX = _A + "storage.import.extraHeaders."
ANN_SECRET_EXTRA_HEADERS_PREFIX = _A + "storage.import.secretExtraHeaders."
ANN_REGISTRY_IMPORT_METHOD = _A + "storage.import.registryImportMethod"
ANN_REGISTRY_IMAGE_STREAM = _A + "storage.import.registryImageStream"
ANN_REGISTRY_IMAGE_ARCHITECTURE = _A + "storage.import.registryImageArchitecture"
ANN_DISK_ID = _A + "storage.import.diskId"
ANN_UUID = _A + "storage.import.uuid"
ANN_BACKING_FILE = _A + "storage.import.backingFile"
ANN_THUMBPRINT = _A + "storage.import.vddk.thumbprint"
ANN_VDDK_INIT_IMAGE_URL = _A + "storage.pod.vddk.initimageurl"
ANN_VDDK_EXTRA_ARGS = _A + "storage.pod.vddk.extraargs"
ANN_IMPORT_POD_NAME = _A + "storage.import.importPodName"
ANN_REQUIRES_SCRATCH = _A + "storage.import.requiresScratch"
ANN_FATAL_ERROR = _A + "storage.import.fatalError"
ANN_POD_PHASE = _A + "storage.pod.phase"
ANN_POD_READY = _A + "storage.pod.ready"
ANN_POD_RESTARTS = _A + "storage.pod.restarts"
ANN_POD_SCHEDULABLE = _A + "storage.pod.schedulable"
ANN_RUNNING_CONDITION = _A + "storage.condition.running"
ANN_RUNNING_CONDITION_MESSAGE = _A + "storage.condition.running.message"
ANN_RUNNING_CONDITION_REASON = _A + "storage.condition.running.reason"
ANN_BOUND_CONDITION = _A + "storage.condition.bound"
ANN_BOUND_CONDITION_MESSAGE = _A + "storage.condition.bound.message"
ANN_BOUND_CONDITION_REASON = _A + "storage.condition.bound.reason"
ANN_PREALLOCATION_REQUESTED = _A + "storage.preallocation.requested"
ANN_PREALLOCATION_APPLIED = _A + "storage.preallocation"
ANN_PRIORITY_CLASS = _A + "storage.pod.priorityclassname"
ANN_SERVICE_ACCOUNT = _A + "storage.pod.serviceAccountName"
ANN_RETAIN_AFTER_COMPLETION = _A + "storage.pod.retainAfterCompletion"
ANN_IMMEDIATE_BINDING = _A + "storage.bind.immediate.requested"
ANN_UPLOAD_TARGET = _A + "storage.upload.target"
ANN_UPLOAD_POD_NAME = _A + "storage.uploadPodName"
ANN_USE_POPULATOR = _A + "storage.usePopulator"
ANN_POPULATOR_KIND = _A + "storage.populator.kind"
ANN_PVC_PRIME = _A + "storage.populator.pvcPrime"
ANN_POPULATOR_PROGRESS = _A + "storage.populator.progress"
ANN_POPULATED_FOR = _A + "storage.populatedFor"
ANN_PRE_POPULATED = _A + "storage.prePopulated"
ANN_ALLOW_CLAIM_ADOPTION = _A + "allowClaimAdoption"
ANN_CREATED_FOR_DATAVOLUME = _A + "createdForDataVolume"
ANN_OWNED_BY_DATAVOLUME = _A + "ownedByDataVolume"
ANN_EXTERNAL_POPULATION = _A + "externalPopulation"
ANN_CREATED_BY_CONTROLLER = _A + "storage.createdByController"
ANN_CREATED_BY_UPLOAD_CONTROLLER = _A + "storage.createdByUploadController"
ANN_OPEN_DEFAULT_PORTS = "k8s.ovn.org/open-default-ports"
ANN_MINIMUM_PVC_SIZE = _A + "minimumSupportedPvcSize"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_DEFAULT_VIRT_CLASS = "storageclass.kubevirt.io/is-default-virt-class"
ANN_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
# Ours, beyond CDI: per-DV overrides of CDIConfig, set on the DataVolume (copied to its PVC like every DV
# annotation); the retry limit may also be set on CDIConfig/config itself.
ANN_POD_RESOURCES = _A + "storage.pod.resources"  # JSON {"limits": {...}, "requests": {...}}, per resource
ANN_MAX_RESTARTS = _A + "storage.import.maxRestarts"  # transient failures tolerated before the DV fails
DEFAULT_MAX_RESTARTS = 5

# Annotations a worker pod inherits from its PVC (§2.1), with the defaults CDI sets when they are absent.
POD_PASSTHROUGH_ANNOTATIONS = (
    "k8s.v1.cni.cncf.io/networks", "v1.multus-cni.io/default-network", "sidecar.istio.io/inject",
    "linkerd.io/inject", ANN_PRIORITY_CLASS, ANN_SERVICE_ACCOUNT,
)
POD_ANNOTATION_DEFAULTS = {"sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}

# Labels (§2.2, §2.3).
LABEL_APP = "app"
APP = "containerized-data-importer"
LABEL_CDI_COMPONENT = GROUP
IMPORTER_COMPONENT = "importer"
UPLOAD_SERVER_COMPONENT = "cdi-upload-server"
LABEL_SERVICE = "service"  # upload pod label its headless Service selects on
LABEL_UPLOAD_TARGET = _A + "uploadTarget"  # upload pod label: the PVC's UID
LABEL_PROMETHEUS = "prometheus.cdi.kubevirt.io"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "cdi-controller"
LABEL_COMPONENT = "app.kubernetes.io/component"
COMPONENT_STORAGE = "storage"
LABEL_FILLING_UP_ALERT = "alerts.k8s.io/KubePersistentVolumeFillingUp"
LABEL_APPLY_STORAGE_PROFILE = _A + "applyStorageProfile"

# Upload server pod (§4.5).
UPLOAD_CONTAINER = "cdi-upload-server"
UPLOAD_TLS_VOLUME_NAME = "tls-config"
# Importer pod (§3.1).
IMPORTER_CONTAINER = "importer"
DATA_VOLUME_NAME = "cdi-data-vol"
CERT_VOLUME_NAME = "cdi-cert-vol"
PROXY_CERT_VOLUME_NAME = "cdi-proxy-cert-vol"
METRICS_PORT_NAME = "metrics"
QEMU_UID = 107
# Secret keys of a source's secretRef (§1.3).
SECRET_ACCESS_KEY_ID = "accessKeyId"
SECRET_SECRET_KEY = "secretKey"

# Content types and source kinds of a DataVolume (§1.2, §1.3).
CONTENT_TYPES = (CONTENT_KUBEVIRT, CONTENT_ARCHIVE)
IMPORT_SOURCES = ("http", "s3", "gcs", "registry", "blank", "imageio", "vddk")
SOURCES = IMPORT_SOURCES + ("pvc", "snapshot", "upload")
ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod")
VOLUME_MODE_FILESYSTEM = "Filesystem"
VOLUME_MODE_BLOCK = "Block"
VOLUME_MODE_FROM_STORAGE_PROFILE = "FromStorageProfile"

# The controller's own env (cdi-facts §5.1; the URL and webhook settings are ours). IMPORTER_IMAGE is the
# controller's setting, not part of the importer's env contract.
ENV_IMPORTER_IMAGE = "IMPORTER_IMAGE"
ENV_UPLOADSERVER_IMAGE = "UPLOADSERVER_IMAGE"
# Ours: where the controller finds the upload signers (PEM files: the CA that signs upload servers'
# certificates, with its key, and the CA bundle whose client certificates upload servers accept).
ENV_UPLOAD_SERVER_CA_CERT = "CDI_UPLOADSERVER_CA_CERT"
ENV_UPLOAD_SERVER_CA_KEY = "CDI_UPLOADSERVER_CA_KEY"
ENV_UPLOAD_CLIENT_CA = "CDI_UPLOADSERVER_CLIENT_CA"
ENV_PULL_POLICY = "PULL_POLICY"
ENV_UPLOADPROXY_URL = "UPLOADPROXY_URL"
ENV_WEBHOOK_PORT = "CDI_WEBHOOK_PORT"
ENV_WEBHOOK_HOST = "CDI_WEBHOOK_HOST"
ENV_WEBHOOK_CERT = "CDI_WEBHOOK_CERT"
ENV_WEBHOOK_KEY = "CDI_WEBHOOK_KEY"
ENV_WEBHOOK_CA = "CDI_WEBHOOK_CA"

# Feature gates (§5.9).
GATE_HONOR_WFFC = "HonorWaitForFirstConsumer"
GATE_CLAIM_ADOPTION = "DataVolumeClaimAdoption"
GATE_WEBHOOK_PVC_RENDERING = "WebhookPvcRendering"

# The CDI CR's spec.certConfig defaults for the server and client certificates: they last 24h and are renewed
# 12h before they end. An upload server stops when the first of them is due (cdi-facts §4.5): 12h by default.
DEFAULT_CERT_DURATION = datetime.timedelta(hours=24)
DEFAULT_CERT_RENEW_BEFORE = datetime.timedelta(hours=12)

# CDIConfig defaults (§5.9, §3.1).
DEFAULT_FILESYSTEM_OVERHEAD = "0.06"
DEFAULT_POD_RESOURCES = {
    "limits": {"cpu": "750m", "memory": "600M"},
    "requests": {"cpu": "100m", "memory": "60M"},
}
