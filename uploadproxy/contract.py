"""CDI's upload contract: the upload server pod's environment, the HTTP paths and texts of server and proxy.

The controller renders upload pods from these names and the server reads the same ones (cdi-facts §4.5);
the proxy and the client use the paths (§4.2). Names we add beyond CDI are marked as ours.
"""

from __future__ import annotations

# Upload server pod environment (cdi-facts §4.5).
TLS_KEY_FILE = "TLS_KEY_FILE"
TLS_CERT_FILE = "TLS_CERT_FILE"
CLIENT_CERT_FILE = "CLIENT_CERT_FILE"
FILESYSTEM_OVERHEAD = "FILESYSTEM_OVERHEAD"
UPLOAD_IMAGE_SIZE = "UPLOAD_IMAGE_SIZE"
CLIENT_NAME = "CLIENT_NAME"
PREALLOCATION = "PREALLOCATION"
TLS_CIPHERS = "TLS_CIPHERS"
TLS_MIN_VERSION = "TLS_MIN_VERSION"
DEADLINE = "DEADLINE"
DESTINATION = "DESTINATION"
LISTEN_ADDRESS = "LISTEN_ADDRESS"
LISTEN_PORT = "LISTEN_PORT"
# Ours: the termination log path (tests), how long a cut resumable upload waits for its client, and the
# PVC's content type for clients that reach the server without the proxy's archive path rewriting.
TERMINATION_LOG = "UPLOAD_TERMINATION_LOG"
RESUME_TIMEOUT = "UPLOAD_RESUME_TIMEOUT"
CONTENT_TYPE = "UPLOAD_CONTENT_TYPE"
# Ours: where the server serves the importer's progress metric (importer.contract.PROGRESS_METRIC, labelled with
# OWNER_UID) for the controller to scrape, so an upload DataVolume shows its progress (CDI's shows N/A).
METRICS_PORT = "UPLOAD_METRICS_PORT"

DEFAULT_TLS_KEY = "/etc/tls/tls.key"
DEFAULT_TLS_CERT = "/etc/tls/tls.crt"
DEFAULT_CLIENT_CA = "/etc/tls/ca.crt"
DEFAULT_DESTINATION = "/data/disk.img"
DEFAULT_LISTEN_ADDRESS = "0.0.0.0"  # noqa: S104 - the pod IP is what the proxy reaches
DEFAULT_PORT = 8443
DEFAULT_METRICS_PORT = 8444
UPLOAD_CLIENT_NAME = "client.upload-server.cdi.kubevirt.io"

# Upload proxy (cdi-facts §4.1).
APISERVER_PUBLIC_KEY = "APISERVER_PUBLIC_KEY"
PROXY_SERVER_CERT_DIR = "/var/run/certs/cdi-uploadproxy-server-cert"
PROXY_CLIENT_CERT_DIR = "/var/run/certs/cdi-uploadserver-client-cert"

# Paths (cdi-facts §4.2).
VERSIONS = ("v1beta1", "v1alpha1")
SYNC, ASYNC, FORM, FORM_ASYNC, ARCHIVE = "upload", "upload-async", "upload-form", "upload-form-async", "upload-archive"
# Ours: how many bytes of the current upload the server holds, and how far processing is.
STATE = "upload-state"
HEALTHZ = "/healthz"
UPLOAD_PATH = f"/v1beta1/{SYNC}"
ASYNC_PATH = f"/v1beta1/{ASYNC}"
STATE_PATH = f"/v1beta1/{STATE}"

# Headers. Ours: the expected checksum of the body, in CDI's checksum form (``sha256:HEX``).
CHECKSUM_HEADER = "X-Cdi-Checksum"
CLONE_CONTENT_TYPE_HEADER = "x-cdi-content-type"

SAVE_FAILED = "Saving stream failed: "
TOO_LARGE = "effective image size is larger than the reported available storage: "


def upload_path(path: str) -> tuple[str, str] | None:
    """``(version, endpoint)`` of an upload-family path such as ``/v1beta1/upload-async``, else None."""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] in VERSIONS and parts[1] in (SYNC, ASYNC, FORM, FORM_ASYNC, ARCHIVE, STATE):
        return parts[0], parts[1]
    return None


def upload_pod_name(pvc: str) -> str:
    """CDI's default upload pod and Service name (annotation ``storage.uploadPodName`` overrides it)."""
    return f"cdi-upload-{pvc}"
