"""What users and KubeVirt see: PVC annotations mirrored from the importer pod, and DataVolume status.

Two steps, as in CDI (cdi-facts §1.7, §3.10, §3.11): :func:`claim_update` turns the importer pod's state into
PVC annotations (the contract virtctl and KubeVirt read), :func:`dv_status` turns the PVC into the DV's
phase, progress, restartCount and conditions. Both are pure, so every timeline of §5.12 is a table test.

Retries are bounded, unlike CDI's: a failure whose Reason is permanent fails the DataVolume at once, a
transient one is retried by the kubelet (restartPolicy OnFailure) until more than ``max_restarts`` restarts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cdi.api import names
from cdi.api.spec import Obj, annotations, labels, meta
from cdi.controller.pvc import requires_work
from importer import contract
from importer.errors import Reason

NORMAL, WARNING = "Normal", "Warning"
_TOO_SMALL_HINTS = ("is larger than the reported available", "no space left on device",
                    "file largest block is bigger than maxblock", "disk quota exceeded")
_IMPORT_PHASES = (names.IMPORT_SCHEDULED, names.IMPORT_IN_PROGRESS)


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


def event_object(involved: Obj, event: Event, *, component: str, now: str) -> Obj:
    """The core/v1 Event about ``involved`` that ``kubectl describe`` shows, as a client-go recorder posts it."""
    m = meta(involved)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{m.get('name', '')}.", "namespace": m.get("namespace") or "default"},
        "involvedObject": {"apiVersion": involved.get("apiVersion", ""), "kind": involved.get("kind", ""),
                           "namespace": m.get("namespace", ""), "name": m.get("name", ""), "uid": m.get("uid", ""),
                           "resourceVersion": m.get("resourceVersion", "")},
        "type": event.type, "reason": event.reason, "message": event.message,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }


@dataclass
class ClaimUpdate:
    """Changes to the PVC after looking at its importer pod. ``None`` values delete an annotation."""

    annotations: dict[str, str | None] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    delete_pod: bool = False


def claim_update(pvc: Obj, pod: Obj, *, max_restarts: int = names.DEFAULT_MAX_RESTARTS) -> ClaimUpdate:
    """Mirror the importer or upload pod into its PVC's annotations and decide whether its work is over.

    An upload PVC (annotated ``storage.upload.target``) also gets ``storage.pod.ready``, virtctl's "upload
    ready" signal; an upload server that exits because its deadline passed is deleted and its phase cleared,
    so that a fresh one (with fresh certificates) takes its place (cdi-facts §4.5).
    """
    before = annotations(pvc)
    upload = names.ANN_UPLOAD_TARGET in before
    update = ClaimUpdate()
    pod_status = pod.get("status") or {}
    container = next(iter(pod_status.get("containerStatuses") or []), {})
    restarts = max(_int(before.get(names.ANN_POD_RESTARTS)), int(container.get("restartCount") or 0))
    pod_phase = pod_status.get("phase") or "Pending"
    update.annotations[names.ANN_POD_RESTARTS] = str(restarts)
    update.annotations[names.ANN_POD_PHASE] = pod_phase
    update.annotations[names.ANN_POD_SCHEDULABLE] = "false" if _unschedulable(pod_status) else None
    if upload:
        statuses = pod_status.get("containerStatuses") or []
        ready = pod_phase == "Running" and bool(statuses) and all(s.get("ready") for s in statuses)
        update.annotations[names.ANN_POD_READY] = str(ready).lower()
    state, last = container.get("state") or {}, container.get("lastState") or {}
    # A container waiting to be restarted shows its failure only in lastState.
    terminated = state.get("terminated") or (last.get("terminated") if "running" not in state else None)
    if "running" in state:
        running = ("true", names.REASON_POD_RUNNING, "")
    elif upload and terminated and _deadline_passed(terminated):
        update.annotations[names.ANN_POD_PHASE] = ""
        update.delete_pod = True
        running = ("false", names.REASON_COMPLETED, contract.DEADLINE_PASSED)
    elif terminated:
        running = _terminated(pvc, terminated, update, failures=restarts + (1 if "terminated" in state else 0),
                              max_restarts=max_restarts)
    else:
        waiting = state.get("waiting") or {}
        running = ("false", waiting.get("reason", ""), waiting.get("message", ""))
    update.annotations[names.ANN_RUNNING_CONDITION] = running[0]
    update.annotations[names.ANN_RUNNING_CONDITION_REASON] = running[1]
    update.annotations[names.ANN_RUNNING_CONDITION_MESSAGE] = running[2]
    if update.annotations[names.ANN_POD_PHASE] == names.SUCCEEDED:
        if before.get(names.ANN_POD_PHASE) != names.SUCCEEDED:
            update.events.append(Event(NORMAL, names.EVENT_PVC_UPLOAD_SUCCEEDED, "Upload Successful") if upload
                                 else Event(NORMAL, names.EVENT_PVC_IMPORT_SUCCEEDED, "Import Successful"))
        update.delete_pod = before.get(names.ANN_RETAIN_AFTER_COMPLETION) != "true"
    return update


def _terminated(pvc: Obj, terminated: Obj, update: ClaimUpdate, *, failures: int,
                max_restarts: int) -> tuple[str, str, str]:
    before = annotations(pvc)
    exit_code = int(terminated.get("exitCode") or 0)
    # Exit 0 can still be a failure: CDI's checksum mismatch, and every permanent failure of ours (not restarted).
    result = contract.parse_termination(exit_code, terminated.get("message") or "")
    if not result.failed:
        if result.preallocation_applied:
            update.annotations[names.ANN_PREALLOCATION_APPLIED] = "true"
        existing = labels(pvc)
        update.labels.update({k: v for k, v in result.labels.items() if k not in existing})
        return "false", names.REASON_COMPLETED, result.message
    message = result.message or terminated.get("reason", "") or f"exit code {exit_code}"
    if result.reason is Reason.TargetTooSmall or any(hint in message for hint in _TOO_SMALL_HINTS):
        message = names.MESSAGE_TOO_SMALL
    reason = names.REASON_IMAGE_PULL_FAILED if "failed to pull image" in message else names.REASON_ERROR
    if result.permanent or failures > max_restarts:
        update.annotations[names.ANN_FATAL_ERROR] = "true"
        update.annotations[names.ANN_POD_PHASE] = names.FAILED
        update.delete_pod = True
        if result.reason is Reason.ChecksumMismatch:
            reason = names.REASON_CHECKSUM_ERROR
        elif not result.permanent:
            message = f"{message} (importer pod failed {failures} times; retry limit {max_restarts} reached)"
    if (before.get(names.ANN_RUNNING_CONDITION_MESSAGE) != message
            or before.get(names.ANN_POD_RESTARTS) != update.annotations[names.ANN_POD_RESTARTS]):
        update.events.append(Event(WARNING, names.EVENT_ERR_IMPORT_FAILED, message))
    return "false", reason, message


def _deadline_passed(terminated: Obj) -> bool:
    exit_code = int(terminated.get("exitCode") or 0)
    return exit_code == 0 and contract.parse_termination(exit_code, terminated.get("message") or "").deadline_passed


def _unschedulable(pod_status: Obj) -> bool:
    return pod_status.get("phase") == "Pending" and any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in pod_status.get("conditions") or [])


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


@dataclass
class StatusUpdate:
    status: Obj
    events: list[Event]


def dv_status(
    dv: Obj, *, pvc: Obj | None, storage_class: Obj | None = None, claim_error: Event | None = None,
    progress: str | None = None, honor_wait_for_first_consumer: bool = True, now: str,
) -> StatusUpdate:
    """The DataVolume's status from its PVC (and a freshly scraped ``progress``), with the events to emit.

    ``claim_error`` is why the PVC could not be created (ErrClaimNotValid, ErrExceededQuota, ...).
    """
    old = dv.get("status") or {}
    old_phase = old.get("phase", names.PHASE_UNSET)
    upload = pvc is not None and names.ANN_UPLOAD_TARGET in annotations(pvc)
    events: list[Event] = []
    status: Obj = {}
    if pvc is None:
        if claim_error is None and (old_phase == names.PHASE_UNSET or names.ANN_PRE_POPULATED in annotations(dv)):
            phase = names.PENDING
        else:
            phase = old_phase
        bound = ("False", claim_error.reason, claim_error.message) if claim_error else (
            "False", names.REASON_NOT_FOUND, names.MESSAGE_NO_PVC)
        running = ("False", "", "")
    else:
        status["claimName"] = meta(pvc).get("name", "")
        phase, bound = _claim_phase(dv, pvc, old_phase=old_phase, storage_class=storage_class,
                                    honor_wffc=honor_wait_for_first_consumer)
        if phase == names.FAILED and bound[1] == names.REASON_CLAIM_LOST and old_phase != names.FAILED:
            events.append(Event(WARNING, names.EVENT_ERR_CLAIM_LOST, f"PVC {meta(pvc).get('name', '')} lost"))
        running = _running_condition(annotations(pvc))
        # Uploads too, which CDI leaves at "N/A" throughout (cdi#2449): the upload server knows the body's size.
        status["progress"] = _progress(old.get("progress"), progress, phase=phase)
        status["restartCount"] = _int(annotations(pvc).get(names.ANN_POD_RESTARTS))
    status["phase"] = phase
    ready = ("True", "", "") if phase == names.SUCCEEDED else ("Unknown" if phase == names.UNKNOWN else "False", "", "")
    if running[0] == "True":
        ready = ("False", names.REASON_TRANSFER_RUNNING, "")
    old_conditions = {c.get("type"): c for c in old.get("conditions") or []}
    status["conditions"] = [
        _condition(old_conditions.get(kind), kind, value, now=now)
        for kind, value in ((names.CONDITION_BOUND, bound), (names.CONDITION_READY, ready),
                            (names.CONDITION_RUNNING, running))
    ]
    pod_phase = annotations(pvc).get(names.ANN_POD_PHASE) if pvc is not None else None
    events.extend(_events(old_phase, phase, old_conditions, bound=bound, running=running, ready=ready,
                          claim=status.get("claimName", ""), imported=pod_phase == names.SUCCEEDED,
                          upload_failed=upload and pod_phase == names.FAILED, upload=upload))
    return StatusUpdate(status, events)


def _claim_phase(dv: Obj, pvc: Obj, *, old_phase: str, storage_class: Obj | None,
                 honor_wffc: bool) -> tuple[str, tuple[str, str, str]]:
    pvc_annotations = annotations(pvc)
    name = meta(pvc).get("name", "")
    pvc_phase = (pvc.get("status") or {}).get("phase") or "Pending"
    bound_override = (pvc_annotations.get(names.ANN_BOUND_CONDITION_REASON),
                      pvc_annotations.get(names.ANN_BOUND_CONDITION_MESSAGE))
    if pvc_phase == "Bound":
        bound = ("True", names.REASON_BOUND, f"PVC {name} Bound")
    elif pvc_phase == "Lost":
        return names.FAILED, ("False", names.REASON_CLAIM_LOST, names.MESSAGE_CLAIM_LOST)
    else:
        bound = ("False", names.REASON_PENDING, f"PVC {name} {pvc_phase}")
    if bound_override[0] and pvc_annotations.get(names.ANN_BOUND_CONDITION) is not None:
        bound = (pvc_annotations[names.ANN_BOUND_CONDITION].capitalize(), bound_override[0], bound_override[1] or "")
    work = requires_work(dv, pvc)
    if not work and pvc_phase in ("Pending", "Bound"):
        return names.SUCCEEDED, bound
    if pvc_annotations.get(names.ANN_POD_PHASE) == names.SUCCEEDED:
        return names.SUCCEEDED, bound
    if pvc_phase == "Pending":
        wffc = (honor_wffc and (storage_class or {}).get("volumeBindingMode") == "WaitForFirstConsumer"
                and names.ANN_IMMEDIATE_BINDING not in pvc_annotations)
        return (names.WAIT_FOR_FIRST_CONSUMER if wffc else names.PENDING), bound
    if pvc_phase != "Bound":
        return names.UNKNOWN, bound
    current = names.PVC_BOUND if old_phase in (names.PHASE_UNSET, names.PENDING, names.WAIT_FOR_FIRST_CONSUMER,
                                               names.UNKNOWN) else old_phase
    if names.ANN_UPLOAD_TARGET in pvc_annotations:
        return _upload_phase(pvc_annotations), bound
    if not pvc_annotations.get(names.ANN_IMPORT_POD_NAME):
        return current, bound
    return _import_phase(pvc_annotations, current=current), bound


def _upload_phase(pvc_annotations: dict[str, str]) -> str:
    """CDI's upload truth table (§1.7 step 4): ready only when the pod runs and passes its readiness probe."""
    if pvc_annotations.get(names.ANN_FATAL_ERROR) == "true":
        return names.FAILED
    ready = pvc_annotations.get(names.ANN_POD_READY, "").lower() == "true"
    if pvc_annotations.get(names.ANN_POD_PHASE) == "Running" and ready:
        return names.UPLOAD_READY
    return names.UPLOAD_SCHEDULED


def _import_phase(pvc_annotations: dict[str, str], *, current: str) -> str:
    if pvc_annotations.get(names.ANN_FATAL_ERROR) == "true":
        return names.FAILED
    pod_phase = pvc_annotations.get(names.ANN_POD_PHASE, "")
    if pod_phase == "Running":
        return names.IMPORT_IN_PROGRESS
    if pod_phase == "Failed" and current in _IMPORT_PHASES:
        return current  # the kubelet restarts it; only a fatal error ends the import
    return names.IMPORT_SCHEDULED


def _running_condition(pvc_annotations: dict[str, str]) -> tuple[str, str, str]:
    if pvc_annotations.get(names.ANN_POD_SCHEDULABLE) == "false":
        return "False", names.REASON_UNSCHEDULABLE, names.MESSAGE_UNSCHEDULABLE
    value = pvc_annotations.get(names.ANN_RUNNING_CONDITION)
    if value == "true":
        return "True", names.REASON_POD_RUNNING, ""
    if value == "false":
        return ("False", pvc_annotations.get(names.ANN_RUNNING_CONDITION_REASON, ""),
                pvc_annotations.get(names.ANN_RUNNING_CONDITION_MESSAGE, ""))
    return "False", "", ""


def _percent(text: str | None) -> float | None:
    try:
        return float(str(text).rstrip("%")) if text and text.endswith("%") else None
    except ValueError:
        return None


def _progress(old: str | None, scraped: str | None, *, phase: str) -> str:
    """``"N/A"`` until known, then ``"45.30%"``, never lower than shown before, ``"100.0%"`` on success."""
    if phase == names.SUCCEEDED:
        return names.PROGRESS_DONE
    known = [p for p in (_percent(old), _percent(scraped)) if p is not None]
    return f"{max(known):.2f}%" if known else names.PROGRESS_UNKNOWN


def _condition(old: Obj | None, kind: str, value: tuple[str, str, str], *, now: str) -> Obj:
    """A condition whose transition time moves only with its status, and heartbeat only with its text."""
    status, reason, message = value
    old = old or {}
    same_status = old.get("status") == status
    same_text = (old.get("reason"), old.get("message")) == (reason, message)
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": (same_status and old.get("lastTransitionTime")) or now,
            "lastHeartbeatTime": (same_text and old.get("lastHeartbeatTime")) or now}


def _events(old_phase: str, phase: str, old_conditions: dict[str, Obj], *, bound: tuple[str, str, str],
            running: tuple[str, str, str], ready: tuple[str, str, str], claim: str,
            imported: bool, upload_failed: bool = False, upload: bool = False) -> list[Event]:
    """CDI's events for a status change: each only when the phase or the condition it tells of moves.

    ``upload_failed``: the upload pod failed. As in CDI, the DataVolume stays or goes back to UploadScheduled
    (the pod runs again) with a warning UploadFailed in place of the UploadScheduled event."""
    events = []
    old_bound = old_conditions.get(names.CONDITION_BOUND) or {}
    if (old_bound.get("status"), old_bound.get("reason")) != bound[:2] and bound[1]:
        events.append(Event(WARNING if bound[1].startswith("Err") else NORMAL, bound[1], bound[2]))
    old_running = old_conditions.get(names.CONDITION_RUNNING) or {}
    running_moved = (old_running.get("status"), old_running.get("reason"), old_running.get("message")) != running
    if upload_failed:
        if claim and (phase != old_phase or running_moved):
            events.append(Event(WARNING, names.EVENT_UPLOAD_FAILED, f"Upload into {claim} failed"))
    elif phase != old_phase:
        by_phase = {
            names.IMPORT_SCHEDULED: (NORMAL, names.EVENT_IMPORT_SCHEDULED, f"Import into {claim} scheduled"),
            names.IMPORT_IN_PROGRESS: (NORMAL, names.EVENT_IMPORT_IN_PROGRESS, f"Import into {claim} in progress"),
            names.UPLOAD_SCHEDULED: (NORMAL, names.EVENT_UPLOAD_SCHEDULED, f"Upload into {claim} scheduled"),
            names.UPLOAD_READY: (NORMAL, names.EVENT_UPLOAD_READY, f"Upload into {claim} ready"),
            names.FAILED: (WARNING, names.EVENT_UPLOAD_FAILED, f"Failed to upload into PVC {claim}") if upload
            else (WARNING, names.EVENT_IMPORT_FAILED, f"Failed to import into PVC {claim}"),
        }
        if phase in by_phase and claim:
            events.append(Event(*by_phase[phase]))
        if phase == names.SUCCEEDED and imported:
            events.append(Event(NORMAL, names.EVENT_UPLOAD_SUCCEEDED, f"Successfully uploaded into {claim}") if upload
                          else Event(NORMAL, names.EVENT_IMPORT_SUCCEEDED, f"Successfully imported into PVC {claim}"))
    if (running[0] == "False" and running[2] and running[2] != old_running.get("message")
            and bound[0] == "True" and ready[0] != "True" and running[1] != "Scratch space required"):
        events.append(Event(WARNING, running[1], running[2]))
    return events
