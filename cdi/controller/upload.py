"""The upload controller's objects for a PVC annotated ``storage.upload.target`` (cdi-facts §4.5, §5.4).

One upload server pod per PVC, a headless Service selecting it, and a Secret with the pod's serving
certificate (signed by the upload-server signer) and the CA whose client certificates it accepts (the upload
proxy's). The pod's state reaches the PVC through :func:`cdi.controller.status.claim_update`, the DV's phase
through :func:`cdi.controller.status.dv_status`; this module only says what should exist.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cdi.api import names
from cdi.api.spec import Obj, annotations, meta, requested_size
from cdi.controller import certs
from cdi.controller.config import filesystem_overhead
from cdi.controller.importer_pod import is_block, progress_owner, worker_pod
from cdi.controller.naming import generated_name, service_name
from cdi.controller.pvc import owner_reference
from importer import contract as ic
from uploadproxy import contract as uc

TLS_DIR = "/etc/tls"


def is_upload_claim(pvc: Obj) -> bool:
    return names.ANN_UPLOAD_TARGET in annotations(pvc)


def wants_upload_pod(pvc: Obj, *, honor_wait_for_first_consumer: bool = True) -> bool:
    """An upload server is due for an upload PVC that is not done, failed or going away, once it is bound
    (or immediate binding was asked for, or WaitForFirstConsumer is not honoured), as CDI's upload controller."""
    notes = annotations(pvc)
    if (not is_upload_claim(pvc) or notes.get(names.ANN_POD_PHASE) == names.SUCCEEDED
            or notes.get(names.ANN_FATAL_ERROR) == "true" or meta(pvc).get("deletionTimestamp")):
        return False
    bound = (pvc.get("status") or {}).get("phase") == "Bound"
    return bound or names.ANN_IMMEDIATE_BINDING in notes or not honor_wait_for_first_consumer


def pod_name(pvc: Obj) -> str:
    return annotations(pvc).get(names.ANN_UPLOAD_POD_NAME) or generated_name("cdi-upload", meta(pvc).get("name", ""))


def upload_service_name(pvc: Obj) -> str:
    return service_name(pod_name(pvc))


def server_hosts(pvc: Obj) -> list[str]:
    """The names the upload server's certificate answers to: its Service's DNS names."""
    service, namespace = upload_service_name(pvc), meta(pvc).get("namespace", "")
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def upload_pod(pvc: Obj, *, image: str, cdi_config_status: Obj | None = None, pull_policy: str = "IfNotPresent",
               deadline: datetime.datetime, verbosity: int = 1) -> Obj:
    """The upload server pod for ``pvc``; it reads its TLS files from the Secret :func:`upload_secret` makes."""
    config_status = cdi_config_status or {}
    notes = annotations(pvc)
    block = is_block(pvc)
    overhead = "0" if block else filesystem_overhead(config_status, (pvc.get("spec") or {}).get("storageClassName"))
    env = {
        uc.TLS_KEY_FILE: f"{TLS_DIR}/tls.key",
        uc.TLS_CERT_FILE: f"{TLS_DIR}/tls.crt",
        uc.CLIENT_CERT_FILE: f"{TLS_DIR}/ca.crt",
        uc.FILESYSTEM_OVERHEAD: overhead,
        uc.UPLOAD_IMAGE_SIZE: str(requested_size(pvc.get("spec") or {}) or ""),
        uc.CLIENT_NAME: uc.UPLOAD_CLIENT_NAME,
        uc.PREALLOCATION: notes.get(names.ANN_PREALLOCATION_REQUESTED, "false"),
        uc.TLS_CIPHERS: "",
        uc.TLS_MIN_VERSION: "",
        uc.DEADLINE: deadline.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        uc.CONTENT_TYPE: notes.get(names.ANN_CONTENT_TYPE) or ic.CONTENT_KUBEVIRT,
        uc.METRICS_PORT: str(uc.DEFAULT_METRICS_PORT),
        ic.OWNER_UID: progress_owner(pvc),
    }
    if block:
        env[uc.DESTINATION] = ic.DEFAULT_BLOCK_PATH
    container: Obj = {
        "name": names.UPLOAD_CONTAINER,
        "image": image,
        "imagePullPolicy": pull_policy,
        "args": [f"-v={verbosity}"],
        "ports": [{"containerPort": uc.DEFAULT_PORT, "protocol": "TCP"},
                  {"name": names.METRICS_PORT_NAME, "containerPort": uc.DEFAULT_METRICS_PORT, "protocol": "TCP"}],
        # The pod IP, not 0.0.0.0: the same on a cluster, and in cdi local (pods share the host's network)
        # it keeps two upload servers from wanting the same port.
        "env": [{"name": k, "value": v} for k, v in env.items()]
        + [{"name": uc.LISTEN_ADDRESS, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "readinessProbe": {"httpGet": {"path": uc.HEALTHZ, "port": uc.DEFAULT_PORT, "scheme": "HTTPS"},
                           "initialDelaySeconds": 2, "periodSeconds": 5},
        "terminationMessagePath": ic.DEFAULT_TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": names.UPLOAD_TLS_VOLUME_NAME, "mountPath": TLS_DIR, "readOnly": True}],
    }
    volumes = [{"name": names.UPLOAD_TLS_VOLUME_NAME, "secret": {"secretName": pod_name(pvc)}}]
    return worker_pod(pvc, name=pod_name(pvc), container=container, volumes=volumes, config_status=config_status,
                      pod_labels={names.LABEL_CDI_COMPONENT: names.UPLOAD_SERVER_COMPONENT,
                                  names.LABEL_SERVICE: upload_service_name(pvc),
                                  names.LABEL_UPLOAD_TARGET: meta(pvc).get("uid", "")},
                      pod_annotations={names.ANN_CREATED_BY_UPLOAD_CONTROLLER: "yes",
                                       names.ANN_OPEN_DEFAULT_PORTS: f'[{{"protocol":"tcp","port":{uc.DEFAULT_PORT}}}]'})


def upload_service(pvc: Obj) -> Obj:
    """The headless Service in front of the upload pod, owned by the PVC (§4.1)."""
    name = upload_service_name(pvc)
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": meta(pvc).get("namespace", ""),
                     "labels": {names.LABEL_APP: names.APP, names.LABEL_CDI_COMPONENT: names.UPLOAD_SERVER_COMPONENT},
                     "ownerReferences": [owner_reference(pvc, kind="PersistentVolumeClaim", api_version="v1")]},
        "spec": {"clusterIP": "None", "selector": {names.LABEL_SERVICE: name},
                 "ports": [{"name": "uploadserver", "protocol": "TCP", "port": uc.DEFAULT_PORT,
                            "targetPort": uc.DEFAULT_PORT}]},
    }


def upload_secret(pvc: Obj, pod: Obj, *, signer: certs.KeyPair, client_ca_pem: bytes,
                  lifetime: datetime.timedelta) -> Obj:
    """The upload pod's TLS Secret, owned by the pod: a new pod (after a deadline) gets new certificates."""
    server = certs.issue(signer, common_name=upload_service_name(pvc), server=True, hosts=server_hosts(pvc),
                         lifetime=lifetime)
    files = {"tls.key": server.key_pem, "tls.crt": server.cert_pem, "ca.crt": client_ca_pem}
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": pod_name(pvc), "namespace": meta(pvc).get("namespace", ""),
                     "labels": {names.LABEL_APP: names.APP},
                     "ownerReferences": [owner_reference(pod, kind="Pod", api_version="v1")]},
        "data": {key: base64.b64encode(value).decode() for key, value in files.items()},
    }


@dataclass(frozen=True)
class Signers:
    """What the controller signs upload servers' certificates with, and the CA bundle of the clients (the
    upload proxy) they accept: PEM files named by the controller's env (Secrets mounted in a Deployment)."""

    server: certs.KeyPair
    client_ca_pem: bytes

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Signers | None:
        paths = [env.get(k, "") for k in (names.ENV_UPLOAD_SERVER_CA_CERT, names.ENV_UPLOAD_SERVER_CA_KEY,
                                          names.ENV_UPLOAD_CLIENT_CA)]
        if not all(paths):
            return None
        cert, key, client_ca = (Path(p).read_bytes() for p in paths)
        return cls(server=certs.KeyPair.load(cert_pem=cert, key_pem=key), client_ca_pem=client_ca)
