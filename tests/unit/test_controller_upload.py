"""The upload controller (cdi-facts §4.5, §5.4, §1.7 step 4): the objects it makes for an upload PVC, and CDI's
upload timeline walked through claim_update (pod → PVC annotations) and dv_status (PVC → DataVolume)."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509

from cdi.api import names
from cdi.controller import certs
from cdi.controller.status import Event
from cdi.controller.upload import (
    Signers, is_upload_claim, pod_name, server_hosts, upload_pod, upload_secret, upload_service,
    wants_upload_pod,
)
from importer import contract
from importer.errors import Reason
from tests.unit.test_controller_status import Import, conditions, failure, pod, running, terminated, waiting

IMAGE = "quay.io/kubevirt/cdi-uploadserver:v1"
WHEN = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
CONFIG = {"filesystemOverhead": {"global": "0.06", "storageClass": {"fast": "0.1"}}}


def claim(*, volume_mode: str = "Filesystem", phase: str = "Bound", **notes: str) -> dict:
    return {"metadata": {"name": "win-disk", "namespace": "vms", "uid": "pvc-uid",
                         "labels": {"team": "vm"},
                         "annotations": {names.ANN_UPLOAD_TARGET: "", names.ANN_CONTENT_TYPE: "kubevirt",
                                         names.ANN_POD_RESTARTS: "0", names.ANN_CREATED_FOR_DATAVOLUME: "dv-uid",
                                         **notes}},
            "spec": {"volumeMode": volume_mode, "storageClassName": "fast",
                     "resources": {"requests": {"storage": "10Gi"}}},
            "status": {"phase": phase}}


def env_of(body: dict) -> dict[str, object]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in body["spec"]["containers"][0]["env"]}


def test_upload_pod_as_cdi_renders_it():
    body = upload_pod(claim(), image=IMAGE, cdi_config_status=CONFIG, deadline=WHEN)
    meta = body["metadata"]
    assert meta["name"] == "cdi-upload-win-disk"
    assert meta["labels"] == {"team": "vm", "app": "containerized-data-importer", "cdi.kubevirt.io": "cdi-upload-server",
                              "service": "cdi-upload-win-disk", "cdi.kubevirt.io/uploadTarget": "pvc-uid"}
    assert meta["annotations"] == {"cdi.kubevirt.io/storage.createdByUploadController": "yes",
                                   "k8s.ovn.org/open-default-ports": '[{"protocol":"tcp","port":8443}]',
                                   "sidecar.istio.io/inject": "false", "linkerd.io/inject": "disabled"}
    assert meta["ownerReferences"][0]["kind"] == "PersistentVolumeClaim" and meta["ownerReferences"][0]["controller"]
    spec = body["spec"]
    assert spec["restartPolicy"] == "OnFailure" and spec["enableServiceLinks"] is False
    (container,) = spec["containers"]
    assert (container["name"], container["image"], container["args"]) == ("cdi-upload-server", IMAGE, ["-v=1"])
    assert container["readinessProbe"] == {"httpGet": {"path": "/healthz", "port": 8443, "scheme": "HTTPS"},
                                           "initialDelaySeconds": 2, "periodSeconds": 5}
    assert env_of(body) == {
        "TLS_KEY_FILE": "/etc/tls/tls.key", "TLS_CERT_FILE": "/etc/tls/tls.crt", "CLIENT_CERT_FILE": "/etc/tls/ca.crt",
        "FILESYSTEM_OVERHEAD": "0.1", "UPLOAD_IMAGE_SIZE": "10Gi", "CLIENT_NAME": "client.upload-server.cdi.kubevirt.io",
        "PREALLOCATION": "false", "TLS_CIPHERS": "", "TLS_MIN_VERSION": "", "DEADLINE": "2026-01-01T12:00:00Z",
        "UPLOAD_CONTENT_TYPE": "kubevirt", "UPLOAD_METRICS_PORT": "8444", "OWNER_UID": "pvc-uid",
        "LISTEN_ADDRESS": {"fieldRef": {"fieldPath": "status.podIP"}}}
    # Ours: the progress metric on a port of its own, named as the importer's so one scraper reads both.
    assert container["ports"] == [{"containerPort": 8443, "protocol": "TCP"},
                                  {"name": "metrics", "containerPort": 8444, "protocol": "TCP"}]
    assert container["volumeMounts"] == [{"name": "cdi-data-vol", "mountPath": "/data"},
                                         {"name": "tls-config", "mountPath": "/etc/tls", "readOnly": True}]
    assert spec["volumes"] == [{"name": "cdi-data-vol", "persistentVolumeClaim": {"claimName": "win-disk"}},
                               {"name": "tls-config", "secret": {"secretName": "cdi-upload-win-disk"}}]


def test_block_upload_pod_writes_the_device_without_overhead():
    body = upload_pod(claim(volume_mode="Block", **{names.ANN_CONTENT_TYPE: "kubevirt"}), image=IMAGE,
                      cdi_config_status=CONFIG, deadline=WHEN)
    container = body["spec"]["containers"][0]
    assert container["volumeDevices"] == [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}]
    assert container["volumeMounts"] == [{"name": "tls-config", "mountPath": "/etc/tls", "readOnly": True}]
    env = env_of(body)
    assert (env["DESTINATION"], env["FILESYSTEM_OVERHEAD"]) == ("/dev/cdi-block-volume", "0")


def test_names_follow_cdi_rules():
    assert pod_name(claim(**{names.ANN_UPLOAD_POD_NAME: "chosen"})) == "chosen"
    long = claim()
    long["metadata"]["name"] = "a." * 40 + "disk"
    service = upload_service(long)
    assert len(service["metadata"]["name"]) <= 63 and "." not in service["metadata"]["name"]
    body = upload_pod(long, image=IMAGE, deadline=WHEN)
    assert body["metadata"]["labels"]["service"] == service["metadata"]["name"] == service["spec"]["selector"]["service"]


def test_headless_service():
    service = upload_service(claim())
    assert service["metadata"]["name"] == "cdi-upload-win-disk"
    assert service["metadata"]["ownerReferences"][0]["uid"] == "pvc-uid"
    assert service["spec"] == {"clusterIP": "None", "selector": {"service": "cdi-upload-win-disk"},
                               "ports": [{"name": "uploadserver", "protocol": "TCP", "port": 8443, "targetPort": 8443}]}


def test_tls_secret_has_a_server_certificate_for_the_service_names():
    signer, client_ca = certs.new_ca("upload server signer"), certs.new_ca("upload client signer")
    server_pod = {"metadata": {"name": "cdi-upload-win-disk", "uid": "pod-uid"}}
    issued = datetime.datetime.now(datetime.timezone.utc)
    secret = upload_secret(claim(), server_pod, signer=signer, client_ca_pem=client_ca.cert_pem,
                           lifetime=datetime.timedelta(hours=24))
    assert secret["metadata"]["name"] == "cdi-upload-win-disk"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "pod-uid", "a new pod gets new certificates"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data["ca.crt"] == client_ca.cert_pem
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    assert cert.issuer == x509.load_pem_x509_certificate(signer.cert_pem).subject
    assert abs(cert.not_valid_after_utc - (issued + datetime.timedelta(hours=24))) < datetime.timedelta(minutes=1)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert sans == server_hosts(claim()) == ["cdi-upload-win-disk", "cdi-upload-win-disk.vms",
                                             "cdi-upload-win-disk.vms.svc", "cdi-upload-win-disk.vms.svc.cluster.local"]


def test_signers_from_env(tmp_path):
    signer, client_ca = certs.new_ca("s"), certs.new_ca("c")
    for name, data in (("s.crt", signer.cert_pem), ("s.key", signer.key_pem), ("c.crt", client_ca.cert_pem)):
        (tmp_path / name).write_bytes(data)
    assert Signers.from_env({}) is None
    loaded = Signers.from_env({names.ENV_UPLOAD_SERVER_CA_CERT: str(tmp_path / "s.crt"),
                               names.ENV_UPLOAD_SERVER_CA_KEY: str(tmp_path / "s.key"),
                               names.ENV_UPLOAD_CLIENT_CA: str(tmp_path / "c.crt")})
    assert loaded == Signers(server=signer, client_ca_pem=client_ca.cert_pem)


@pytest.mark.parametrize(("pvc", "honor_wffc", "wanted"), [
    (claim(), True, True),
    (claim(phase="Pending"), True, False),  # WaitForFirstConsumer: the consumer picks the node first
    (claim(phase="Pending", **{names.ANN_IMMEDIATE_BINDING: ""}), True, True),
    (claim(phase="Pending"), False, True),
    (claim(**{names.ANN_POD_PHASE: "Succeeded"}), True, False),
    (claim(**{names.ANN_FATAL_ERROR: "true"}), True, False),
    (claim(**{names.ANN_POD_PHASE: ""}), True, True),  # an expired upload pod was cleared: a fresh one
])
def test_when_an_upload_pod_is_due(pvc: dict, honor_wffc: bool, wanted: bool):
    assert wants_upload_pod(pvc, honor_wait_for_first_consumer=honor_wffc) is wanted


def test_an_import_claim_is_no_upload_claim():
    plain = claim()
    del plain["metadata"]["annotations"][names.ANN_UPLOAD_TARGET]
    assert not is_upload_claim(plain) and not wants_upload_pod(plain)


class Upload(Import):
    """One upload DataVolume and its PVC, advanced as the controller's handlers do."""

    def __init__(self) -> None:
        super().__init__()
        self.pvc = claim()


def ready(body: dict, value: bool = True) -> dict:
    body["status"]["containerStatuses"][0]["ready"] = value
    return body


DONE = contract.success_message(preallocation_applied=False, message=contract.UPLOAD_COMPLETE, scratch_key=False)


def test_upload_timeline():
    dv = Upload()
    assert dv.status()["phase"] == names.UPLOAD_SCHEDULED  # bound, no pod yet
    assert dv.events == [Event("Normal", "Bound", "PVC win-disk Bound"),
                         Event("Normal", "UploadScheduled", "Upload into win-disk scheduled")]

    dv.pod(pod("Pending", waiting("ContainerCreating")))
    assert dv.status()["phase"] == names.UPLOAD_SCHEDULED and dv.events == []
    assert dv.pvc["metadata"]["annotations"][names.ANN_POD_READY] == "false"

    dv.pod(ready(pod("Running", running()), False))  # running, readiness probe not passed yet
    status = dv.status()
    assert status["phase"] == names.UPLOAD_SCHEDULED
    assert conditions(status)["Running"] == ("True", "Pod is running", "")

    dv.pod(ready(pod("Running", running())))
    status = dv.status()
    assert (status["phase"], status["progress"]) == (names.UPLOAD_READY, "N/A")
    assert dv.pvc["metadata"]["annotations"][names.ANN_POD_READY] == "true"
    assert dv.events == [Event("Normal", "UploadReady", "Upload into win-disk ready")]

    # Ours: the upload server's progress shows (CDI's stays N/A), and a lower scrape (a new upload after a
    # failed one starts from 0) never takes it back.
    assert dv.status(progress="42.50%")["progress"] == "42.50%"
    assert dv.status(progress="10.00%")["progress"] == "42.50%"
    assert dv.status()["phase"] == names.UPLOAD_READY and dv.events == []

    dv.pod(pod("Succeeded", terminated(0, DONE)))
    status = dv.status()
    assert (status["phase"], status["progress"]) == (names.SUCCEEDED, "100.0%")
    assert conditions(status)["Running"] == ("False", "Completed", "Upload Complete")
    assert conditions(status)["Ready"] == ("True", "", "")
    assert dv.events == [Event("Normal", "UploadSucceeded", "Successfully uploaded into win-disk")]
    assert dv.pvc_events == [Event("Normal", "UploadSucceeded", "Upload Successful")]
    assert dv.pod_deleted
    assert dv.pvc["metadata"]["annotations"][names.ANN_POD_PHASE] == "Succeeded"


def test_a_failed_upload_pod_is_a_warning_and_the_upload_is_scheduled_again():
    dv = Upload()
    dv.pod(ready(pod("Running", running())))
    assert dv.status()["phase"] == names.UPLOAD_READY
    dv.pod(pod("Failed", terminated(1, "disk full")))  # a pod the kubelet gave up (evicted, say)
    status = dv.status()
    assert status["phase"] == names.UPLOAD_SCHEDULED  # as CDI: the failed pod is not the DataVolume's end
    assert Event("Warning", "UploadFailed", "Upload into win-disk failed") in dv.events
    assert not any(e.reason == "UploadScheduled" for e in dv.events)
    assert dv.status()["phase"] == names.UPLOAD_SCHEDULED and dv.events == []  # once, not on every reconcile


def test_an_upload_that_fails_for_good_fails_the_datavolume_with_upload_failed():
    dv = Upload()
    dv.pod(ready(pod("Running", running())))
    dv.status()
    dv.pod(pod("Running", terminated(0, failure(Reason.UnsafeImage, "qcow2 has a backing file"))))
    status = dv.status()
    assert status["phase"] == names.FAILED
    assert dv.events[0] == Event("Warning", "UploadFailed", "Upload into win-disk failed")


def test_an_expired_upload_pod_is_replaced_not_succeeded():
    dv = Upload()
    dv.pod(ready(pod("Running", running())))
    assert dv.status()["phase"] == names.UPLOAD_READY
    dv.pod(pod("Succeeded", terminated(0, contract.deadline_message())))
    notes = dv.pvc["metadata"]["annotations"]
    assert (notes[names.ANN_POD_PHASE], notes[names.ANN_POD_READY]) == ("", "false")
    assert dv.pod_deleted and dv.pvc_events == []
    assert dv.status()["phase"] == names.UPLOAD_SCHEDULED
    assert wants_upload_pod(dv.pvc), "a fresh pod follows"
