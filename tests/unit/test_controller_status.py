"""DataVolume status over CDI's observable timelines (cdi-facts §1.7, §3.10, §3.11, §5.12).

Each test walks one import the way the controller sees it: the importer pod's state is mirrored into the
PVC (claim_update), then the DV status is computed from the PVC (dv_status), step by step.
"""

from __future__ import annotations

import itertools

import pytest

from cdi.api import names
from cdi.controller.status import Event, claim_update, dv_status
from importer import contract
from importer.errors import ImportFailed, Reason

WFFC = {"metadata": {"name": "local"}, "volumeBindingMode": "WaitForFirstConsumer"}
IMMEDIATE = {"metadata": {"name": "fast"}, "volumeBindingMode": "Immediate"}
_clock = itertools.count()


def tick() -> str:
    return f"2026-01-01T00:{next(_clock) % 60:02d}:00Z"


def running() -> dict:
    return {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


def waiting(reason: str) -> dict:
    return {"waiting": {"reason": reason}}


def terminated(exit_code: int, message: str) -> dict:
    return {"terminated": {"exitCode": exit_code, "message": message, "reason": "Error" if exit_code else "Completed"}}


def failure(reason: Reason, message: str) -> str:
    return contract.failure_message(ImportFailed(reason, message), source="http")


DONE = contract.success_message(preallocation_applied=False, labels={"instancetype.kubevirt.io/default-preference": "fedora"})


def pod(phase: str, state: dict, *, last: dict | None = None, restarts: int = 0, conditions=()) -> dict:
    return {"status": {"phase": phase, "conditions": list(conditions), "containerStatuses": [
        {"name": "importer", "restartCount": restarts, "state": state, "lastState": last or {}}]}}


class Import:
    """One DataVolume and its PVC, advanced the way the controller's handlers would."""

    def __init__(self, *, storage_class: dict = IMMEDIATE, dv_annotations: dict | None = None,
                 max_restarts: int = names.DEFAULT_MAX_RESTARTS) -> None:
        self.dv = {"metadata": {"name": "root-disk", "namespace": "vms", "uid": "dv-uid",
                                "annotations": dv_annotations or {}}, "spec": {}}
        self.pvc: dict | None = None
        self.storage_class = storage_class
        self.max_restarts = max_restarts
        self.events: list[Event] = []
        self.pvc_events: list[Event] = []
        self.pod_deleted = False

    def create_pvc(self, **annotations: str) -> None:
        self.pvc = {"metadata": {"name": "root-disk", "namespace": "vms", "annotations": {
            names.ANN_POD_RESTARTS: "0", names.ANN_CREATED_FOR_DATAVOLUME: "dv-uid",
            names.ANN_SOURCE: "http", names.ANN_ENDPOINT: "https://h/d.qcow2", **annotations}},
            "status": {"phase": "Pending"}}

    def bind(self, phase: str = "Bound") -> None:
        self.pvc["status"]["phase"] = phase

    def pod(self, state: dict) -> None:
        self.pvc["metadata"]["annotations"].setdefault(names.ANN_IMPORT_POD_NAME, "importer-root-disk")
        update = claim_update(self.pvc, state, max_restarts=self.max_restarts)
        annotations = self.pvc["metadata"]["annotations"]
        for key, value in update.annotations.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        self.pvc["metadata"].setdefault("labels", {}).update(update.labels)
        self.pvc_events += update.events
        self.pod_deleted = update.delete_pod

    def status(self, *, progress: str | None = None, claim_error: Event | None = None) -> dict:
        update = dv_status(self.dv, pvc=self.pvc, storage_class=self.storage_class, progress=progress,
                           claim_error=claim_error, now=tick())
        self.dv["status"] = update.status
        self.events = update.events
        return update.status


def conditions(status: dict) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_legacy_http_import_timeline():
    dv = Import()
    status = dv.status()
    assert status["phase"] == "Pending" and "progress" not in status and "claimName" not in status
    assert conditions(status) == {"Bound": ("False", "NotFound", "No PVC found"), "Ready": ("False", "", ""),
                                  "Running": ("False", "", "")}

    dv.create_pvc()
    status = dv.status()
    assert (status["phase"], status["progress"], status["claimName"], status["restartCount"]) == (
        "Pending", "N/A", "root-disk", 0)
    assert conditions(status)["Bound"] == ("False", "Pending", "PVC root-disk Pending")
    assert dv.events == [Event("Normal", "Pending", "PVC root-disk Pending")]

    dv.bind()
    status = dv.status()
    assert status["phase"] == "PVCBound"
    assert conditions(status)["Bound"] == ("True", "Bound", "PVC root-disk Bound")
    assert dv.events == [Event("Normal", "Bound", "PVC root-disk Bound")]

    dv.pod(pod("Pending", waiting("ContainerCreating")))
    status = dv.status()
    assert status["phase"] == "ImportScheduled"
    assert conditions(status)["Running"] == ("False", "ContainerCreating", "")
    assert dv.events == [Event("Normal", "ImportScheduled", "Import into root-disk scheduled")]

    dv.pod(pod("Running", running()))
    status = dv.status(progress="45.3%")
    assert (status["phase"], status["progress"]) == ("ImportInProgress", "45.30%")
    assert conditions(status)["Running"] == ("True", "Pod is running", "")
    assert conditions(status)["Ready"] == ("False", "TransferRunning", "")
    assert dv.events == [Event("Normal", "ImportInProgress", "Import into root-disk in progress")]
    assert dv.pvc["metadata"]["annotations"][names.ANN_POD_PHASE] == "Running"

    dv.pod(pod("Succeeded", terminated(0, DONE)))
    status = dv.status()
    assert (status["phase"], status["progress"]) == ("Succeeded", "100.0%")
    assert conditions(status) == {"Bound": ("True", "Bound", "PVC root-disk Bound"), "Ready": ("True", "", ""),
                                  "Running": ("False", "Completed", "Import Complete")}
    assert dv.events == [Event("Normal", "ImportSucceeded", "Successfully imported into PVC root-disk")]
    assert dv.pvc_events == [Event("Normal", "ImportSucceeded", "Import Successful")]
    assert dv.pod_deleted
    assert dv.pvc["metadata"]["annotations"][names.ANN_POD_PHASE] == "Succeeded"
    assert dv.pvc["metadata"]["labels"] == {"instancetype.kubevirt.io/default-preference": "fedora"}


def test_wait_for_first_consumer_then_consumer_binds():
    dv = Import(storage_class=WFFC)
    dv.create_pvc()
    assert dv.status()["phase"] == "WaitForFirstConsumer"
    dv.bind()
    assert dv.status()["phase"] == "PVCBound"


def test_immediate_binding_requested_shows_pending():
    dv = Import(storage_class=WFFC)
    dv.create_pvc(**{names.ANN_IMMEDIATE_BINDING: ""})
    assert dv.status()["phase"] == "Pending"


def test_retained_pod_is_kept():
    dv = Import()
    dv.create_pvc(**{names.ANN_RETAIN_AFTER_COMPLETION: "true"})
    dv.bind()
    dv.pod(pod("Succeeded", terminated(0, DONE)))
    assert not dv.pod_deleted and dv.status()["phase"] == "Succeeded"


def test_two_transient_failures_then_success():
    dv = Import()
    dv.create_pvc()
    dv.bind()
    dv.pod(pod("Running", running()))
    assert dv.status(progress="60.00%")["progress"] == "60.00%"
    broken = failure(Reason.TransferFailed, "connection reset by peer")
    dv.pod(pod("Running", terminated(1, broken)))
    status = dv.status()
    assert status["phase"] == "ImportInProgress" and status["restartCount"] == 0
    assert conditions(status)["Running"] == ("False", "Error", broken)
    assert dv.events == [Event("Warning", "Error", broken)]
    assert dv.pvc_events[-1] == Event("Warning", "ErrImportFailed", broken)
    assert not dv.pod_deleted

    dv.pod(pod("Running", waiting("CrashLoopBackOff"), last=terminated(1, broken), restarts=1))
    status = dv.status(progress="5.00%")
    assert (status["phase"], status["restartCount"], status["progress"]) == ("ImportInProgress", 1, "60.00%")
    assert conditions(status)["Running"] == ("False", "Error", broken)

    dv.pod(pod("Running", running(), last=terminated(1, broken), restarts=2))
    status = dv.status(progress="30.00%")
    assert (status["phase"], status["restartCount"], status["progress"]) == ("ImportInProgress", 2, "60.00%")
    dv.pod(pod("Succeeded", terminated(0, DONE), restarts=2))
    status = dv.status()
    assert (status["phase"], status["restartCount"], status["progress"]) == ("Succeeded", 2, "100.0%")


@pytest.mark.parametrize(("reason", "running_reason"), [
    (Reason.NotFound, "Error"), (Reason.Unauthorized, "Error"), (Reason.UnsafeImage, "Error"),
    (Reason.ChecksumMismatch, "ChecksumError"),
])
def test_permanent_failure_fails_on_the_first_attempt(reason, running_reason):
    dv = Import()
    dv.create_pvc()
    dv.bind()
    dv.pod(pod("Running", running()))
    dv.status(progress="12.5%")
    message = failure(reason, "nope")
    dv.pod(pod("Running", terminated(1, message)))
    status = dv.status()
    assert (status["phase"], status["restartCount"], status["progress"]) == ("Failed", 0, "12.50%")
    assert conditions(status)["Running"] == ("False", running_reason, message)
    assert reason.name in message
    assert Event("Warning", "ImportFailed", "Failed to import into PVC root-disk") in dv.events
    assert dv.pod_deleted
    annotations = dv.pvc["metadata"]["annotations"]
    assert annotations[names.ANN_FATAL_ERROR] == "true" and annotations[names.ANN_POD_PHASE] == "Failed"
    dv.pvc["status"]["phase"] = "Bound"
    assert dv.status()["phase"] == "Failed"  # stays failed on later reconciles


def test_transient_failures_stop_at_the_limit():
    dv = Import(max_restarts=2)
    dv.create_pvc()
    dv.bind()
    broken = failure(Reason.SourceUnreachable, "connection refused")
    for restarts in (0, 1):
        dv.pod(pod("Running", terminated(1, broken), restarts=restarts))
        assert dv.status()["phase"] == "ImportInProgress"
        assert not dv.pod_deleted
    dv.pod(pod("Running", terminated(1, broken), restarts=2))
    status = dv.status()
    assert (status["phase"], status["restartCount"]) == ("Failed", 2)
    reason, message = conditions(status)["Running"][1:]
    assert reason == "Error" and "SourceUnreachable" in message
    assert "importer pod failed 3 times; retry limit 2 reached" in message
    assert dv.pod_deleted


def test_per_datavolume_limit_of_zero_fails_the_first_transient_failure():
    dv = Import(max_restarts=0)
    dv.create_pvc()
    dv.bind()
    dv.pod(pod("Running", terminated(1, failure(Reason.Timeout, "stalled"))))
    assert dv.status()["phase"] == "Failed"


@pytest.mark.parametrize(("text", "reason", "message"), [
    ("Unable to process data: write /data/disk.img: no space left on device", "Error",
     "DataVolume too small to contain image"),
    (failure(Reason.TargetTooSmall, "virtual size 2 GiB exceeds 1 GiB"), "Error",
     "DataVolume too small to contain image"),
    ("failed to pull image: r/d:1", "ImagePullFailed", "failed to pull image: r/d:1"),
])
def test_running_message_simplifications(text, reason, message):
    dv = Import()
    dv.create_pvc()
    dv.bind()
    dv.pod(pod("Running", terminated(1, text)))
    assert conditions(dv.status())["Running"][1:] == (reason, message)


def test_unschedulable_pod():
    dv = Import()
    dv.create_pvc()
    dv.bind()
    unscheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    dv.pod(pod("Pending", {}, conditions=[unscheduled]))
    status = dv.status()
    assert status["phase"] == "ImportScheduled"
    assert conditions(status)["Running"] == ("False", "Unschedulable", "Importer pod cannot be scheduled")
    dv.pod(pod("Running", running()))
    assert names.ANN_POD_SCHEDULABLE not in dv.pvc["metadata"]["annotations"]


def test_lost_claim_fails():
    dv = Import()
    dv.create_pvc()
    dv.bind()
    dv.status()
    dv.bind("Lost")
    status = dv.status()
    assert status["phase"] == "Failed"
    assert conditions(status)["Bound"] == ("False", "ClaimLost", "Claim Lost")
    assert Event("Warning", "ErrClaimLost", "PVC root-disk lost") in dv.events


def test_unknown_claim_phase():
    dv = Import()
    dv.create_pvc()
    dv.bind("Terminating")
    assert dv.status()["phase"] == "Unknown"
    assert conditions(dv.dv["status"])["Ready"][0] == "Unknown"


def test_populated_for_and_adopted_claims_succeed_without_import():
    dv = Import()
    dv.create_pvc(**{names.ANN_POPULATED_FOR: "root-disk"})
    assert dv.status()["phase"] == "Succeeded"
    adopted = Import(dv_annotations={names.ANN_ALLOW_CLAIM_ADOPTION: "true"})
    adopted.pvc = {"metadata": {"name": "root-disk", "annotations": {}}, "status": {"phase": "Bound"}}
    status = adopted.status()
    assert status["phase"] == "Succeeded" and conditions(status)["Ready"] == ("True", "", "")


def test_claim_not_valid_leaves_the_phase_unset():
    dv = Import()
    error = Event("Warning", names.EVENT_ERR_CLAIM_NOT_VALID, "ContentType Archive cannot have block volumeMode")
    status = dv.status(claim_error=error)
    assert status["phase"] == ""
    assert conditions(status)["Bound"] == ("False", "ErrClaimNotValid", "ContentType Archive cannot have block volumeMode")
    assert dv.events == [error]
    dv.status(claim_error=error)
    assert dv.events == []  # the same error is not announced twice


def test_condition_times_move_only_on_change():
    dv = Import()
    dv.create_pvc()
    dv.bind()
    first = {c["type"]: c for c in dv.status()["conditions"]}
    dv.pod(pod("Pending", waiting("ContainerCreating")))
    second = {c["type"]: c for c in dv.status()["conditions"]}
    assert second["Bound"] == first["Bound"]
    assert second["Running"]["lastTransitionTime"] == first["Running"]["lastTransitionTime"]
    assert second["Running"]["lastHeartbeatTime"] != first["Running"]["lastHeartbeatTime"]
    dv.pod(pod("Running", running()))
    third = {c["type"]: c for c in dv.status()["conditions"]}
    assert third["Running"]["lastTransitionTime"] != second["Running"]["lastTransitionTime"]


@pytest.mark.parametrize(("scraped", "shown"), [
    (None, "N/A"), ("0%", "0.00%"), ("45.3%", "45.30%"), ("99.999%", "100.00%"), ("garbage", "N/A"),
])
def test_progress_format(scraped, shown):
    dv = Import()
    dv.create_pvc()
    dv.bind()
    dv.pod(pod("Running", running()))
    assert dv.status(progress=scraped)["progress"] == shown


def test_cdis_exit_zero_checksum_mismatch_is_a_failure():
    dv = Import()
    dv.create_pvc()
    dv.bind()
    text = '{"message":"Unable to process data: sha256 checksum mismatch: expected 00, got 11"}'
    dv.pod(pod("Succeeded", terminated(0, text)))
    status = dv.status()
    assert status["phase"] == "Failed"
    assert conditions(status)["Running"] == ("False", "ChecksumError",
                                             "Unable to process data: sha256 checksum mismatch: expected 00, got 11")
    assert dv.pvc["metadata"]["annotations"][names.ANN_POD_PHASE] == "Failed" and dv.pod_deleted


def test_an_import_finished_between_two_looks_still_announces_success():
    dv = Import()
    dv.create_pvc()
    dv.status()
    dv.bind()
    dv.pod(pod("Succeeded", terminated(0, DONE)))
    assert dv.status()["phase"] == "Succeeded"
    assert Event("Normal", "ImportSucceeded", "Successfully imported into PVC root-disk") in dv.events
