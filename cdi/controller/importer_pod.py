"""The importer pod for a PVC, and whether one should exist now (cdi-facts §3.1, §3.2, §5.3, §5.7).

The pod never gets a scratch volume: the importer converts without one. Env var names come from
:mod:`importer.contract`, the module the importer itself reads them with.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from cdi.api import names
from cdi.api.spec import Obj, annotations, labels, meta, requested_size
from cdi.controller.config import filesystem_overhead, pod_resources
from cdi.controller.naming import importer_pod_name
from cdi.controller.pvc import owner_reference
from importer import contract as c

SUCCEEDED = "Succeeded"


def is_import_claim(pvc: Obj) -> bool:
    """A PVC the import controller works on: it names a source, and nobody else populates it."""
    pvc_annotations = annotations(pvc)
    return ((names.ANN_ENDPOINT in pvc_annotations or names.ANN_SOURCE in pvc_annotations)
            and pvc_annotations.get(names.ANN_EXTERNAL_POPULATION) != "true")


def wants_importer_pod(pvc: Obj, *, honor_wait_for_first_consumer: bool = True) -> bool:
    """Whether an importer pod should run for ``pvc`` now.

    Not for a finished or fatally failed import, and not before the PVC is bound: with WaitForFirstConsumer
    the consumer's pod picks the node, unless immediate binding was asked for (§5.7).
    """
    pvc_annotations = annotations(pvc)
    if (not is_import_claim(pvc) or pvc_annotations.get(names.ANN_POD_PHASE) == SUCCEEDED
            or pvc_annotations.get(names.ANN_FATAL_ERROR) == "true" or meta(pvc).get("deletionTimestamp")):
        return False
    bound = (pvc.get("status") or {}).get("phase") == "Bound"
    return bound or names.ANN_IMMEDIATE_BINDING in pvc_annotations or not honor_wait_for_first_consumer


def progress_owner(pvc: Obj) -> str:
    """The uid a worker pod labels its progress metric with: the DataVolume's when one owns the PVC."""
    owners = meta(pvc).get("ownerReferences") or []
    return str(owners[0].get("uid", "") if len(owners) == 1 else meta(pvc).get("uid", ""))


def pod_name(pvc: Obj) -> str:
    return annotations(pvc).get(names.ANN_IMPORT_POD_NAME) or importer_pod_name(meta(pvc).get("name", ""))


def importer_pod(
    pvc: Obj, *, image: str, cdi_config_status: Obj | None = None, pull_policy: str = "IfNotPresent",
    insecure_registries: Iterable[str] = (), verbosity: int = 1,
) -> Obj:
    """The pod that fills ``pvc`` from the source its annotations name."""
    pvc_annotations = annotations(pvc)
    config_status = cdi_config_status or {}
    block = is_block(pvc)
    container: Obj = {
        "name": names.IMPORTER_CONTAINER,
        "image": image,
        "imagePullPolicy": pull_policy,
        "args": [f"-v={verbosity}"],
        "ports": [{"name": names.METRICS_PORT_NAME, "containerPort": c.DEFAULT_METRICS_PORT, "protocol": "TCP"}],
        "terminationMessagePath": c.DEFAULT_TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "env": _env(pvc, config_status=config_status, block=block, insecure_registries=insecure_registries),
    }
    volumes: list[Obj] = []
    if pvc_annotations.get(names.ANN_CERT_CONFIGMAP):
        volumes.append({"name": names.CERT_VOLUME_NAME,
                        "configMap": {"name": pvc_annotations[names.ANN_CERT_CONFIGMAP]}})
        container["volumeMounts"] = [{"name": names.CERT_VOLUME_NAME, "mountPath": c.CERT_MOUNT}]
    return worker_pod(pvc, name=pod_name(pvc), container=container, volumes=volumes, config_status=config_status,
                      pod_labels={names.LABEL_CDI_COMPONENT: names.IMPORTER_COMPONENT, names.LABEL_PROMETHEUS: "true",
                                  names.LABEL_MANAGED_BY: names.MANAGED_BY,
                                  names.LABEL_COMPONENT: names.COMPONENT_STORAGE},
                      pod_annotations={names.ANN_CREATED_BY_CONTROLLER: "yes"})


def is_block(pvc: Obj) -> bool:
    return (pvc.get("spec") or {}).get("volumeMode") == names.VOLUME_MODE_BLOCK


def worker_pod(pvc: Obj, *, name: str, container: Obj, volumes: list[Obj], config_status: Obj,
               pod_labels: dict[str, str], pod_annotations: dict[str, str]) -> Obj:
    """A pod working on ``pvc`` (importer or upload server), with what CDI gives every such pod (§3.1, §4.5):
    the claim at /data or as /dev/cdi-block-volume, qemu's uid and fsGroup, no privileges, the pod settings
    and pass-through annotations of the PVC, the PVC's labels, and the PVC as its controller."""
    pvc_annotations = annotations(pvc)
    container = {**container, "resources": pod_resources(config_status, pvc), "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
        "runAsUser": names.QEMU_UID, "seccompProfile": {"type": "RuntimeDefault"},
    }}
    data = {"name": names.DATA_VOLUME_NAME}
    mounts = list(container.get("volumeMounts") or [])
    if is_block(pvc):
        container["volumeDevices"] = [{**data, "devicePath": c.DEFAULT_BLOCK_PATH}]
    else:
        mounts.insert(0, {**data, "mountPath": c.DEFAULT_DATA_DIR})
    container["volumeMounts"] = mounts
    spec: Obj = {
        "restartPolicy": "OnFailure",
        "enableServiceLinks": False,
        "containers": [container],
        "volumes": [{**data, "persistentVolumeClaim": {"claimName": meta(pvc).get("name", "")}}, *volumes],
        "securityContext": {"fsGroup": names.QEMU_UID, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if pvc_annotations.get(names.ANN_PRIORITY_CLASS):
        spec["priorityClassName"] = pvc_annotations[names.ANN_PRIORITY_CLASS]
    if pvc_annotations.get(names.ANN_SERVICE_ACCOUNT):
        spec["serviceAccountName"] = pvc_annotations[names.ANN_SERVICE_ACCOUNT]
    if config_status.get("imagePullSecrets"):
        spec["imagePullSecrets"] = config_status["imagePullSecrets"]
    pod_annotations = {**names.POD_ANNOTATION_DEFAULTS, **pod_annotations}
    pod_annotations.update({k: v for k, v in pvc_annotations.items() if k in names.POD_PASSTHROUGH_ANNOTATIONS})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": meta(pvc).get("namespace", ""),
            "labels": {**labels(pvc), names.LABEL_APP: names.APP, **pod_labels},
            "annotations": pod_annotations,
            "ownerReferences": [owner_reference(pvc, kind="PersistentVolumeClaim", api_version="v1")],
        },
        "spec": spec,
    }


def _env(pvc: Obj, *, config_status: Obj, block: bool, insecure_registries: Iterable[str]) -> list[Obj]:
    a = annotations(pvc)
    source = a.get(names.ANN_SOURCE) or c.SOURCE_HTTP
    endpoint = a.get(names.ANN_ENDPOINT, "")
    overhead = "0" if block else filesystem_overhead(config_status, (pvc.get("spec") or {}).get("storageClassName"))
    insecure = a.get(names.ANN_INSECURE_SKIP_VERIFY) == "true" or (
        source == c.SOURCE_REGISTRY and _registry_host(endpoint) in set(insecure_registries))
    proxy = config_status.get("importProxy") or {}
    values = {
        c.SOURCE: source,
        c.ENDPOINT: endpoint,
        c.CONTENT_TYPE: a.get(names.ANN_CONTENT_TYPE) or c.CONTENT_KUBEVIRT,
        c.IMAGE_SIZE: str(requested_size(pvc.get("spec") or {}) or ""),
        c.OWNER_UID: progress_owner(pvc),
        c.FILESYSTEM_OVERHEAD: overhead,
        c.INSECURE_TLS: str(insecure).lower(),
        c.CHECKSUM: a.get(names.ANN_CHECKSUM, ""),
        c.PREALLOCATION: a.get(names.ANN_PREALLOCATION_REQUESTED, "false"),
        c.CACHE_MODE: "",
        c.REGISTRY_IMAGE_ARCHITECTURE: a.get(names.ANN_REGISTRY_IMAGE_ARCHITECTURE, ""),
        c.HTTP_PROXY: proxy.get("HTTPProxy", ""),
        c.HTTPS_PROXY: proxy.get("HTTPSProxy", ""),
        c.NO_PROXY: proxy.get("noProxy", ""),
    }
    env: list[Obj] = [{"name": k, "value": v} for k, v in values.items()]
    env.append({"name": c.METRICS_ADDRESS, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    if a.get(names.ANN_SECRET) and source != "gcs":
        for var, key in ((c.ACCESS_KEY_ID, names.SECRET_ACCESS_KEY_ID), (c.SECRET_KEY, names.SECRET_SECRET_KEY)):
            env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": a[names.ANN_SECRET], "key": key}}})
    if a.get(names.ANN_CERT_CONFIGMAP):
        env.append({"name": c.CERT_DIR, "value": c.CERT_MOUNT})
    headers = sorted((int(k.rsplit(".", 1)[1]), v) for k, v in a.items()
                     if k.startswith(names.ANN_EXTRA_HEADERS_PREFIX) and k.rsplit(".", 1)[1].isdigit())
    # The importer reads EXTRA_HEADER_0, _1, ... until the first gap, so number them densely.
    env.extend({"name": f"{c.EXTRA_HEADER_PREFIX}{i}", "value": v} for i, (_, v) in enumerate(headers))
    return env


def _registry_host(endpoint: str) -> str:
    """``host[:port]`` of a ``docker://`` endpoint, the form CDIConfig's insecureRegistries lists."""
    parts = urlsplit(endpoint)
    return parts.netloc if parts.scheme == "docker" else ""
