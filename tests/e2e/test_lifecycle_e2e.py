"""A DataVolume's life beyond the happy path, in `cdi local`: permanent failures fail on the first attempt,
transient ones retry up to the limit, WaitForFirstConsumer, claim adoption, populatedFor, a controller killed
mid-import, retainAfterCompletion and deletion."""

from __future__ import annotations

import json
import re

import pytest

from cdi.api import names
from cdi.cli.localsystem import LocalCDI
from importer.checksum import file_sha256
from tests.fixtures.cdi_system import CDISystem, datavolume, wait_for
from tests.fixtures.images import ImageSet
from tests.support.httpfault import Behaviour, FaultServer

pytestmark = pytest.mark.root


def conditions(dv: dict) -> dict[str, dict]:
    return {c["type"]: c for c in dv["status"]["conditions"]}


def importer_pod(cdi: CDISystem, name: str) -> dict | None:
    return cdi.pod(f"importer-{name}")


def test_checksum_mismatch_fails_on_the_first_attempt(cdi: CDISystem, images: ImageSet,
                                                      fault_server: FaultServer) -> None:
    url = fault_server.url(fault_server.publish(images.path("disk.qcow2")))
    cdi.apply(datavolume("bad-sum", {"http": {"url": url, "checksum": "sha256:" + "0" * 64}}))
    dv = cdi.wait_phase("bad-sum", names.FAILED)
    running = conditions(dv)["Running"]
    assert (running["status"], running["reason"]) == ("False", "ChecksumError")
    # CDI's wording, then our reason: one line a user can act on.
    assert running["message"].startswith("Unable to process data: ChecksumMismatch: ")
    assert "\n" not in running["message"]
    assert dv["status"]["restartCount"] == 0 and conditions(dv)["Ready"]["status"] == "False"
    assert len(fault_server.requests_for("disk.qcow2")) == 1, "a checksum mismatch is never retried"
    cdi.wait_events("bad-sum", "ImportFailed")
    assert cdi.in_volume("bad-sum", "ls -A /pvc").split() in ([], ["lost+found"]), "no disk.img is left behind"


def test_not_found_fails_fast(cdi: CDISystem, fault_server: FaultServer) -> None:
    cdi.apply(datavolume("missing", {"http": {"url": fault_server.url("nothing-here.qcow2")}}))
    dv = cdi.wait_phase("missing", names.FAILED)
    assert conditions(dv)["Running"]["message"].startswith("Unable to connect to http data source: NotFound: ")
    assert dv["status"]["restartCount"] == 0
    assert len(fault_server.requests_for("nothing-here.qcow2")) == 1


def test_a_source_failing_twice_then_working(cdi: CDISystem, images: ImageSet, fault_server: FaultServer) -> None:
    """Each importer run retries 503s six times in itself; twelve 503s make two pods fail, the third succeeds."""
    name = fault_server.publish(images.path("disk.raw.gz"), "flaky.raw.gz")
    fault_server.behaviours[name] = Behaviour(errors=[503] * 12)
    cdi.apply(datavolume("flaky", {"http": {"url": fault_server.url(name)}}))
    dv = cdi.wait_phase("flaky", names.SUCCEEDED, timeout=240)
    assert dv["status"]["restartCount"] == 2 and dv["status"]["progress"] == "100.0%"
    cdi.wait_events("flaky", "Error")  # Running turned False with the importer's reason
    expected = images.expected_raw("disk.raw.gz")
    size = expected.stat().st_size
    assert cdi.volume_sha256("flaky", length=size) == file_sha256(expected, length=size)


def test_progress_during_an_import_comes_from_the_importer_and_never_goes_back(cdi: CDISystem, images: ImageSet,
                                                                             fault_server: FaultServer) -> None:
    """The source sends half the image, stalls, then drops the connection; the importer resumes from there.

    While it stalls, the DataVolume shows CDI's "NN.NN%" scraped from the running importer's metric.
    """
    source = images.path("disk.raw")
    size = source.stat().st_size
    name = fault_server.publish(source, "halting.raw")
    fault_server.behaviours[name] = Behaviour(stall_after=(size + 1) // 2, stall_seconds=15)
    cdi.apply(datavolume("halting", {"http": {"url": fault_server.url(name)}}))
    seen: list[str] = []

    def succeeded() -> dict | None:
        status = cdi.dv("halting").get("status") or {}
        if status.get("progress") and status["progress"] not in seen[-1:]:
            seen.append(status["progress"])
        return status if status.get("phase") == names.SUCCEEDED else None

    status = wait_for(succeeded, timeout=120, what="DataVolume halting: Succeeded")
    assert status["progress"] == "100.0%" and status["restartCount"] == 0
    during = [p for p in seen if re.fullmatch(r"\d{1,2}\.\d\d%", p) and p != "0.00%"]
    assert during, f"no progress between 0 and 100 % was shown: {seen}"
    values = [float(p.rstrip("%")) for p in seen if p != "N/A"]
    assert values == sorted(values), f"progress went backwards: {seen}"
    assert len(fault_server.requests_for(name)) == 2, "the dropped connection was resumed, not restarted"
    expected = images.expected_raw("disk.raw")
    assert cdi.volume_sha256("halting", length=size) == file_sha256(expected, length=size)


def test_retry_limit_from_the_datavolume(cdi: CDISystem, images: ImageSet, fault_server: FaultServer) -> None:
    name = fault_server.publish(images.path("disk.raw.gz"), "down.raw.gz")
    fault_server.behaviours[name] = Behaviour(errors=[503] * 1000)
    cdi.apply(datavolume("give-up", {"http": {"url": fault_server.url(name)}},
                         annotations={names.ANN_MAX_RESTARTS: "1"}))
    dv = cdi.wait_phase("give-up", names.FAILED, timeout=240)
    message = conditions(dv)["Running"]["message"]
    assert message.startswith("Unable to process data: TransferFailed: "), message
    assert message.endswith("(importer pod failed 2 times; retry limit 1 reached)"), message
    # With the tests' 0.2 s kubelet back-off the container may start once more before the controller deletes it.
    assert dv["status"]["restartCount"] in (1, 2)
    cdi.wait_pod_deleted("importer-give-up")


def test_wait_for_first_consumer(cdi: CDISystem, images: ImageSet, fault_server: FaultServer) -> None:
    url = fault_server.url(fault_server.publish(images.path("disk.raw.gz"), "wffc.raw.gz"))
    cdi.apply(datavolume("wffc", {"http": {"url": url}}, storage_class="local-wffc"))
    dv = cdi.wait_phase("wffc", "WaitForFirstConsumer")
    assert conditions(dv)["Bound"]["status"] == "False" and importer_pod(cdi, "wffc") is None
    assert fault_server.requests_for("wffc.raw.gz") == []
    # KubeVirt's part: a pod that consumes the claim gets it bound to a node, then the import runs.
    cdi.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "consumer"},
               "spec": {"restartPolicy": "Never", "volumes": [{"name": "d", "persistentVolumeClaim": {
                   "claimName": "wffc"}}], "containers": [{"name": "c", "image": "busybox", "command": ["true"],
                                                           "volumeMounts": [{"name": "d", "mountPath": "/d"}]}]}})
    cdi.wait_phase("wffc", names.SUCCEEDED)
    assert (cdi.pvc("wffc") or {})["metadata"]["annotations"].get(names.ANN_SELECTED_NODE)


def test_immediate_binding_requested_on_a_wffc_class(cdi: CDISystem, images: ImageSet,
                                                     fault_server: FaultServer) -> None:
    url = fault_server.url(fault_server.publish(images.path("disk.raw.gz"), "now.raw.gz"))
    cdi.apply(datavolume("now", {"http": {"url": url}}, storage_class="local-wffc",
                         annotations={names.ANN_IMMEDIATE_BINDING: ""}))
    cdi.wait_phase("now", names.SUCCEEDED)


def _claim(name: str, annotations: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}}


def test_claim_adoption_and_populated_for(cdi: CDISystem, fault_server: FaultServer) -> None:
    """What KubeVirt relies on for dataVolumeTemplates over existing claims and for VM restores: no import."""
    cdi.apply(_claim("adopted"), _claim("restored", {names.ANN_POPULATED_FOR: "restored"}))
    url = fault_server.url("never-fetched.qcow2")
    cdi.apply(datavolume("adopted", {"http": {"url": url}}, annotations={names.ANN_ALLOW_CLAIM_ADOPTION: "true"}),
              datavolume("restored", {"http": {"url": url}}))
    for name in ("adopted", "restored"):
        dv = cdi.wait_phase(name, names.SUCCEEDED)
        assert conditions(dv)["Ready"]["status"] == "True"
        owners = (cdi.pvc(name) or {})["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["name"]) for o in owners] == [(names.DATAVOLUME, name)]
    assert fault_server.requests_for("never-fetched.qcow2") == [] and importer_pod(cdi, "adopted") is None


def test_an_existing_claim_without_adoption_is_a_conflict(cdi: CDISystem) -> None:
    cdi.apply(_claim("taken"))
    # The webhook refuses a DataVolume over a claim it may not adopt (CDI's message names the PVC).
    done = cdi.kubectl("create", "-f", "-", check=False, stdin=json.dumps(datavolume("taken", {"blank": {}})))
    assert done.returncode != 0 and "taken" in done.stderr


def test_controller_killed_mid_import(cdi: CDISystem, local_cdi: LocalCDI, images: ImageSet,
                                      fault_server: FaultServer) -> None:
    """A restarted controller finds the running importer pod and makes no second one; the transfer goes on."""
    name = fault_server.publish(images.path("disk.qcow2"), "slow.qcow2")
    fault_server.behaviours[name] = Behaviour(stall_after=256 << 10, stall_seconds=6)
    cdi.apply(datavolume("restart", {"http": {"url": fault_server.url(name)}}))
    cdi.wait_phase("restart", "ImportInProgress")
    pod = importer_pod(cdi, "restart")
    assert pod is not None
    local_cdi.stop_controller(kill=True)
    local_cdi.start_controller()
    still = importer_pod(cdi, "restart")
    assert still is not None and still["metadata"]["uid"] == pod["metadata"]["uid"]
    dv = cdi.wait_phase("restart", names.SUCCEEDED)
    assert dv["status"]["restartCount"] == 0
    # The server stalls every response after 256 KiB; the one importer resumes each time with Range.
    starts = [r for r in fault_server.requests_for(name) if "range" not in r.headers]
    assert len(starts) == 1, "the download was neither started over nor duplicated"
    expected = images.expected_raw("disk.qcow2")
    size = expected.stat().st_size
    assert cdi.volume_sha256("restart", length=size) == file_sha256(expected, length=size)


def test_retain_after_completion_then_delete(cdi: CDISystem, images: ImageSet, fault_server: FaultServer) -> None:
    url = fault_server.url(fault_server.publish(images.path("disk.raw.gz"), "keep.raw.gz"))
    cdi.apply(datavolume("keep", {"http": {"url": url}}, annotations={names.ANN_RETAIN_AFTER_COMPLETION: "true"}))
    cdi.wait_phase("keep", names.SUCCEEDED)
    pod = importer_pod(cdi, "keep")
    assert pod is not None and pod["status"]["phase"] == "Succeeded", "the importer pod is kept for debugging"
    cdi.kubectl("delete", "dv", "keep")
    wait_for(lambda: cdi.pvc("keep") is None and importer_pod(cdi, "keep") is None, timeout=60,
             what="the claim and the pod to go with their DataVolume")
