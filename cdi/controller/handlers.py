"""The controller process: kopf handlers that fetch, call the pure functions and apply their answer.

Event-driven: a change to a DataVolume, its PVC or its importer pod queues that DataVolume for a reconcile
(a coalescing work queue: a burst of events is one reconcile, and one DataVolume is never reconciled twice at
once). Events carrying an object exactly as the last reconcile left it are dropped, so the controller's own
writes do not wake it again. Reconciles read DataVolumes, PVCs and worker pods as the watches last delivered
them (memory.Latest), asking the API server only for what the watches have not brought. The only periodic work
is scraping the progress of running importer and upload pods. Raw watch events (``on.event``) are used on
purpose: they need no finalizers and no kopf bookkeeping annotations on users' objects. Every decision is
recomputed from the objects themselves, and generated names are deterministic, so a restarted controller picks
up where the previous one stopped without creating a second importer pod.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from cdi.api import names
from cdi.api.spec import Obj, annotations, meta
from cdi.api.validation import Invalid, validate_datavolume
from cdi.controller import certs, upload
from cdi.controller.config import UploadLifetimes, cdi_config_status, max_restarts, storage_profile, upload_lifetimes
from cdi.controller.importer_pod import importer_pod, is_import_claim, pod_name, wants_importer_pod
from cdi.controller.kube import Kube, KubeError, path
from cdi.controller.memory import Latest, Recent, Seen
from cdi.controller.progress import owner_uid, progress_news, scrape_progress
from cdi.controller.pvc import (
    ClaimAction, ClaimNotValid, adopted_pvc_patch, claim_action, conflict_message, render_pvc,
)
from cdi.controller.status import WARNING, Event, claim_update, dv_status, event_object
from cdi.controller.workqueue import WorkQueue

log = logging.getLogger("cdi-controller")
PROGRESS_INTERVAL = 2.0
# Reconciles wait on the API server far more than they compute: a few threads keep it busy, and kopf's own
# executor stays free for the admission webhook, whose caller times out.
RECONCILE_WORKERS = 4
# Seconds a reconcile may use CDIConfig, StorageClasses and StorageProfiles read before. Each is watched and any
# change of theirs forgets them at once, so this only bounds a missed event; at 1 s, a DataVolume created after a
# pause paid three reads before its PVC could be made.
CLUSTER_CONFIG_TTL = 60.0

DATAVOLUME, UPLOAD_CLAIM = "DataVolume", "upload PVC"
_CLAIM, _POD = "PersistentVolumeClaim", "Pod"  # kinds, as _latest keys them
Key = tuple[str, str, str]  # (DATAVOLUME or UPLOAD_CLAIM, namespace, name)
Later = list[Callable[[], None]]  # what a reconcile does once the DataVolume's status is written


@dataclass
class Settings:
    """The controller's own configuration, from its Deployment's env (names as CDI's, cdi-facts §5.1)."""

    image: str = "quay.io/kubevirt/cdi-importer:latest"
    pull_policy: str = "IfNotPresent"
    upload_proxy_url: str = ""
    default_gates: list[str] = field(default_factory=lambda: [names.GATE_HONOR_WFFC])
    upload_image: str = "quay.io/kubevirt/cdi-uploadserver:latest"
    upload_signers: upload.Signers | None = None

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        return cls(image=env.get(names.ENV_IMPORTER_IMAGE) or cls.image,
                   pull_policy=env.get(names.ENV_PULL_POLICY) or cls.pull_policy,
                   upload_proxy_url=env.get(names.ENV_UPLOADPROXY_URL, ""),
                   upload_image=env.get(names.ENV_UPLOADSERVER_IMAGE) or cls.upload_image,
                   upload_signers=upload.Signers.from_env(env))


_kube: Kube | None = None
_settings = Settings()
_queue: WorkQueue[Key] = WorkQueue()
_seen = Seen()
_recent = Recent(CLUSTER_CONFIG_TTL)
_latest = Latest()
_running: dict[tuple[str, str], Obj] = {}  # (namespace, DataVolume): its importer or upload pod while it runs
_progress: dict[tuple[str, str], str] = {}  # (namespace, DataVolume): progress scraped since it ran


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube.from_environment()
    return _kube


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cdi(plural: str, *, namespace: str | None = None, name: str | None = None,
         subresource: str | None = None) -> str:
    return path(group=names.GROUP, version=names.VERSION, plural=plural, namespace=namespace, name=name,
                subresource=subresource)


def _core(plural: str, *, namespace: str | None = None, name: str | None = None) -> str:
    return path(plural=plural, namespace=namespace, name=name)


def _storage_classes() -> list[Obj]:
    return kube().list(path(group="storage.k8s.io", version="v1", plural="storageclasses"))


def _config() -> Obj | None:
    return kube().get(_cdi(names.CDICONFIGS, name=names.CDICONFIG_NAME))


def _cdi_resource() -> Obj | None:
    """The CDI CR (there is one). Read afresh where an upload pod's lifetimes are decided, not cached: that is
    rare, and a certConfig just changed then applies to the very next pod."""
    return next(iter(kube().list(_cdi(names.CDIS))), None)


def _post_events(involved: Obj, events: list[Event]) -> None:
    """Events are for people: one that cannot be posted is logged, and the reconcile goes on."""
    for event in events:
        try:
            kube().create(_core("events", namespace=meta(involved).get("namespace") or "default"),
                          event_object(involved, event, component=names.MANAGED_BY, now=now()))
        except KubeError as error:
            log.warning("event %s about %s not posted: %s", event.reason, meta(involved).get("name"), error)


def _read(kind: str, url_path: str, *, namespace: str, name: str) -> Obj | None:
    """The watches' latest version of a DataVolume, PVC or worker pod, else the API server's (None: known absent)."""
    obj = _latest.get(kind, namespace, name)
    if obj is not None or _latest.absent(kind, namespace, name):
        return obj
    obj = kube().get(url_path)
    _latest.fetched(kind, namespace, name, obj)
    return obj


def _written(obj: Obj | None) -> Obj | None:
    """What a create or patch answered, kept as the latest version: the next reconcile may come before its echo."""
    _latest.wrote(obj)
    return obj


def _gates(config: Obj | None) -> list[str]:
    return list(((config or {}).get("spec") or {}).get("featureGates") or _settings.default_gates)


# --- DataVolumes -------------------------------------------------------------------------------------------


def reconcile_datavolume(namespace: str, name: str) -> None:
    """Bring one DataVolume's PVC, importer pod and status in line with its spec."""
    k = kube()
    dv = _read(names.DATAVOLUME, _cdi(names.DATAVOLUMES, namespace=namespace, name=name), namespace=namespace,
               name=name)
    if dv is None or meta(dv).get("deletionTimestamp"):
        return
    pvc_path = _core("persistentvolumeclaims", namespace=namespace, name=name)
    pvc = _read(_CLAIM, pvc_path, namespace=namespace, name=name)
    config = _recent.get("config", _config)
    classes = _recent.get("storage classes", _storage_classes)
    config_status = (config or {}).get("status") or cdi_config_status(config, storage_classes=classes)
    gates = _gates(config)
    action = claim_action(dv, pvc, feature_gates=gates)
    claim_error: Event | None = None
    if action is ClaimAction.CREATE:
        try:
            body = render_pvc(dv, storage_classes=classes, cdi_config_status=config_status,
                              storage_profiles=_recent.get("storage profiles",
                                                           lambda: k.list(_cdi(names.STORAGEPROFILES))),
                              persistent_volumes=[] if classes else k.list(_core("persistentvolumes")))
        except ClaimNotValid as error:
            claim_error = Event(WARNING, names.EVENT_ERR_CLAIM_NOT_VALID, str(error))
        else:
            pvc = _written(k.create(_core("persistentvolumeclaims", namespace=namespace), body))
            if pvc is None:  # someone made one since we looked: what becomes of it is decided with it
                pvc = k.get(pvc_path)
                _latest.fetched(_CLAIM, namespace, name, pvc)
                action = claim_action(dv, pvc, feature_gates=gates)
    if action is ClaimAction.ADOPT:
        pvc = _written(k.patch(pvc_path, adopted_pvc_patch(dv, pvc)))
        if pvc and annotations(pvc).get(names.ANN_POPULATED_FOR) == name:
            dv = _written(k.patch(_cdi(names.DATAVOLUMES, namespace=namespace, name=name),
                                  {"metadata": {"annotations": {names.ANN_PRE_POPULATED: name}}})) or dv
    elif action is ClaimAction.CONFLICT:
        claim_error, pvc = Event(WARNING, names.EVENT_ERR_RESOURCE_EXISTS, conflict_message(pvc)), None
    elif action is ClaimAction.DELETING:
        claim_error = Event(WARNING, names.EVENT_ERR_RESOURCE_MARKED_FOR_DELETION, f"PVC {name} marked for deletion")
        pvc = None
    pod = None
    later: Later = []
    if pvc is not None and action in (ClaimAction.CREATE, ClaimAction.OURS) and is_import_claim(pvc):
        pvc, pod = _sync_importer(pvc, config=config, config_status=config_status, gates=gates, later=later)
    elif pvc is not None and action in (ClaimAction.CREATE, ClaimAction.OURS) and upload.is_upload_claim(pvc):
        pvc, pod = _sync_upload(pvc, config=config, config_status=config_status, gates=gates, later=later)
    storage_class = next((sc for sc in classes if meta(sc).get("name") == ((pvc or {}).get("spec") or {})
                          .get("storageClassName")), None)
    update = dv_status(dv, pvc=pvc, storage_class=storage_class, claim_error=claim_error,
                       progress=_progress.get((namespace, name)),
                       honor_wait_for_first_consumer=names.GATE_HONOR_WFFC in gates, now=now())
    try:
        if update.status != dv.get("status"):
            dv = _written(k.patch(_cdi(names.DATAVOLUMES, namespace=namespace, name=name, subresource="status"),
                                  {"status": update.status})) or dv
        _post_events(dv, update.events)
    finally:  # also when the status could not be written: the PVC's events are not computed again
        for step in later:
            step()
    # An adopted PVC is worked on as ours by the next reconcile, which the echo of the adoption starts.
    _seen.record(dv, pod, None if action is ClaimAction.ADOPT else pvc)


def _sync_importer(pvc: Obj, *, config: Obj | None, config_status: Obj, gates: list[str],
                   later: Later) -> tuple[Obj, Obj | None]:
    """Create the importer pod when one is due, or mirror the existing one into the PVC; (PVC, pod)."""
    k = kube()
    namespace, claim = meta(pvc).get("namespace", ""), meta(pvc).get("name", "")
    pod_path = _core("pods", namespace=namespace, name=pod_name(pvc))
    wanted = wants_importer_pod(pvc, honor_wait_for_first_consumer=names.GATE_HONOR_WFFC in gates)
    # Not wanted and never annotated: no pod was made for it. A pod is annotated in the PVC right after it is
    # made, with its first state (one write, not two); a controller stopped in between finds the pod again,
    # as a PVC bound and not yet done still wants one.
    if names.ANN_IMPORT_POD_NAME not in annotations(pvc):
        if not wanted:
            return pvc, None
        # Never made, or made by a controller stopped before it could annotate: creating it answers 409 then.
        pod = _latest.get(_POD, namespace, pod_name(pvc))
    else:
        pod = _read(_POD, pod_path, namespace=namespace, name=pod_name(pvc))
    if pod is None:
        if not wanted:
            return pvc, None
        insecure = ((config or {}).get("spec") or {}).get("insecureRegistries") or []
        body = importer_pod(pvc, image=_settings.image, cdi_config_status=config_status,
                            pull_policy=_settings.pull_policy, insecure_registries=insecure)
        pod = _written(k.create(_core("pods", namespace=namespace), body)) or k.get(pod_path)
    if pod is None:
        return pvc, None
    return _mirror_pod(pvc, pod, pod_path, config=config, later=later,
                       annotate={names.ANN_IMPORT_POD_NAME: meta(pod).get("name", "")}), pod


def _sync_upload(pvc: Obj, *, config: Obj | None, config_status: Obj, gates: list[str],
                 later: Later) -> tuple[Obj, Obj | None]:
    """The upload server pod, its Service and TLS Secret for an upload PVC (cdi-facts §5.4); (PVC, pod)."""
    k = kube()
    namespace, claim = meta(pvc).get("namespace", ""), meta(pvc).get("name", "")
    pvc_path = _core("persistentvolumeclaims", namespace=namespace, name=claim)
    pod_path = _core("pods", namespace=namespace, name=upload.pod_name(pvc))
    pod = _read(_POD, pod_path, namespace=namespace, name=upload.pod_name(pvc))
    signers = _settings.upload_signers
    lifetimes: UploadLifetimes | None = None
    if pod is None:
        if (not upload.wants_upload_pod(pvc, honor_wait_for_first_consumer=names.GATE_HONOR_WFFC in gates)
                or signers is None):
            if signers is None:
                log.error("no upload signers configured (%s): cannot start the upload pod of %s/%s",
                          names.ENV_UPLOAD_SERVER_CA_CERT, namespace, claim)
            return pvc, None
        if names.ANN_UPLOAD_POD_NAME not in annotations(pvc):
            pvc = _written(k.patch(pvc_path, {"metadata": {"annotations": {
                names.ANN_UPLOAD_POD_NAME: upload.pod_name(pvc)}}})) or pvc
        # A Secret of the pod's name left by the pod before it (a restart after the deadline reuses the name)
        # would let the new pod start at once with the old files: gone first, the new pod waits for its own.
        k.delete(_core("secrets", namespace=namespace, name=upload.pod_name(pvc)))
        k.create(_core("services", namespace=namespace), upload.upload_service(pvc))
        lifetimes = upload_lifetimes(_cdi_resource())
        pod = _written(k.create(_core("pods", namespace=namespace), upload.upload_pod(
            pvc, image=_settings.upload_image, cdi_config_status=config_status, pull_policy=_settings.pull_policy,
            deadline=datetime.datetime.now(datetime.timezone.utc) + lifetimes.deadline))) or k.get(pod_path)
    if pod is not None and signers is not None and (pod.get("status") or {}).get("phase", "Pending") == "Pending":
        # Also after a crash between creating the pod and its Secret: the pod waits for it.
        _own_upload_secret(pvc, pod, signers, lifetimes=lifetimes)
    if pod is None:
        return pvc, None
    pvc = _mirror_pod(pvc, pod, pod_path, config=config, later=later)
    if annotations(pvc).get(names.ANN_POD_PHASE) == names.SUCCEEDED:
        k.delete(_core("services", namespace=namespace, name=upload.upload_service_name(pvc)))
    return pvc, pod


def _own_upload_secret(pvc: Obj, pod: Obj, signers: upload.Signers, *, lifetimes: UploadLifetimes | None) -> None:
    """The pod's TLS Secret, signed once: any Secret of its name from an earlier pod went before this pod came.

    ``lifetimes`` are those the pod was just made with, so that its certificate outlives its deadline; None when
    the pod is older than this reconcile (its Secret was lost to a crash): the CDI CR is read again."""
    k = kube()
    namespace = meta(pvc).get("namespace", "")
    if k.get(_core("secrets", namespace=namespace, name=upload.pod_name(pvc))) is None:
        lifetime = (lifetimes or upload_lifetimes(_cdi_resource())).server_certificate
        k.create(_core("secrets", namespace=namespace), upload.upload_secret(
            pvc, pod, signer=signers.server, client_ca_pem=signers.client_ca_pem, lifetime=lifetime))


def _mirror_pod(pvc: Obj, pod: Obj, pod_path: str, *, config: Obj | None, later: Later,
                annotate: dict[str, str] | None = None) -> Obj:
    """The worker pod's state into its PVC's annotations; the deletion of a pod that is done and the PVC's events go
    to ``later``: after the DataVolume's status, which its user waits for (as in CDI, where the import controller
    deletes the pod and the DataVolume controller writes the status, neither waiting for the other)."""
    k = kube()
    pvc_path = _core("persistentvolumeclaims", namespace=meta(pvc).get("namespace", ""),
                     name=meta(pvc).get("name", ""))
    update = claim_update(pvc, pod, max_restarts=max_restarts(config, pvc))
    current = annotations(pvc)
    changed = {k_: v for k_, v in {**(annotate or {}), **update.annotations}.items() if current.get(k_) != v}
    if changed or update.labels:
        patch: Obj = {"metadata": {"annotations": changed}}
        if update.labels:
            patch["metadata"]["labels"] = update.labels
        pvc = _written(k.patch(pvc_path, patch)) or pvc
    if update.delete_pod:
        later.append(lambda: k.delete(pod_path))
    mirrored = pvc
    later.append(lambda: _post_events(mirrored, update.events))
    return pvc


def _owning_datavolume(obj: Obj) -> str | None:
    refs = meta(obj).get("ownerReferences") or []
    return next((r.get("name") for r in refs if r.get("controller") and r.get("kind") == names.DATAVOLUME), None)


@kopf.on.event(names.GROUP, names.VERSION, names.DATAVOLUMES)
async def datavolume_changed(type: str | None, body: kopf.Body, name: str, namespace: str, **_: Any) -> None:
    _latest.saw(type, dict(body))
    if type == "DELETED":
        _progress.pop((namespace, name), None)
    if _seen.is_news(type, dict(body)) and type != "DELETED":
        _queue.add((DATAVOLUME, namespace, name))


@kopf.on.event("", "v1", "persistentvolumeclaims", labels={names.LABEL_APP: names.APP})
async def claim_changed(type: str | None, body: kopf.Body, namespace: str, **_: Any) -> None:
    _latest.saw(type, dict(body))
    owner = _owning_datavolume(dict(body))
    if owner and _seen.is_news(type, dict(body)):
        _queue.add((DATAVOLUME, namespace, owner))


def reconcile_upload_claim(namespace: str, name: str) -> None:
    """An upload PVC without a DataVolume (``cdi image-upload pvc``, virtctl's): CDI's PVC-level upload controller."""
    pvc = _read(_CLAIM, _core("persistentvolumeclaims", namespace=namespace, name=name), namespace=namespace,
                name=name)
    if pvc is None or _owning_datavolume(pvc) or not upload.is_upload_claim(pvc):
        return
    config = _recent.get("config", _config)
    config_status = (config or {}).get("status") or cdi_config_status(
        config, storage_classes=_recent.get("storage classes", _storage_classes))
    later: Later = []
    _seen.record(*_sync_upload(pvc, config=config, config_status=config_status, gates=_gates(config), later=later))
    for step in later:
        step()


@kopf.on.event("", "v1", "persistentvolumeclaims", annotations={names.ANN_UPLOAD_TARGET: kopf.PRESENT})
async def upload_claim_changed(type: str | None, body: kopf.Body, name: str, namespace: str, **_: Any) -> None:
    _latest.saw(type, dict(body))
    if _seen.is_news(type, dict(body)) and type != "DELETED":
        _queue.add((UPLOAD_CLAIM, namespace, name))


@kopf.on.event("", "v1", "pods", labels={names.LABEL_CDI_COMPONENT: names.UPLOAD_SERVER_COMPONENT})
async def upload_server_changed(type: str | None, body: kopf.Body, namespace: str, **_: Any) -> None:
    _latest.saw(type, dict(body))
    claim = _owning_claim(dict(body))
    if not claim:
        return
    _track_running(type, dict(body), key=(namespace, claim))
    if _seen.is_news(type, dict(body)):
        _queue.add((DATAVOLUME, namespace, claim))  # when the PVC has a DataVolume
        _queue.add((UPLOAD_CLAIM, namespace, claim))  # when it has none


@kopf.on.event("", "v1", "pods", labels={names.LABEL_CDI_COMPONENT: names.IMPORTER_COMPONENT})
async def importer_changed(type: str | None, body: kopf.Body, namespace: str, **_: Any) -> None:
    _latest.saw(type, dict(body))
    # The importer pod belongs to the PVC, and the PVC has its DataVolume's name (legacy path).
    claim = _owning_claim(dict(body))
    if not claim:
        return
    _track_running(type, dict(body), key=(namespace, claim))
    if _seen.is_news(type, dict(body)):
        _queue.add((DATAVOLUME, namespace, claim))


def _track_running(type: str | None, pod: Obj, *, key: tuple[str, str]) -> None:
    """A running worker pod (importer or upload server) is scraped for progress until it stops."""
    if type != "DELETED" and (pod.get("status") or {}).get("phase") == "Running":
        _running[key] = pod
    else:
        _running.pop(key, None)


def _reconcile(key: Key) -> None:
    kind, namespace, name = key
    (reconcile_datavolume if kind == DATAVOLUME else reconcile_upload_claim)(namespace, name)


def _owning_claim(pod: Obj) -> str | None:
    return next((r.get("name") for r in meta(pod).get("ownerReferences") or []
                 if r.get("kind") == "PersistentVolumeClaim"), None)


async def _poll_progress() -> None:
    """Progress is a metric, not an object: scrape the running worker pods every two seconds, and reconcile the
    DataVolumes whose progress moved."""
    while True:
        await asyncio.sleep(PROGRESS_INTERVAL)
        running = dict(_running)
        try:
            scraped = await asyncio.to_thread(
                lambda: {key: scrape_progress(pod, owner_uid=owner_uid(pod)) for key, pod in running.items()})
        except Exception:  # a failed round must not end progress reporting for good
            log.exception("progress round failed")
            continue
        for (namespace, name), progress in scraped.items():
            news = progress_news(progress, shown=_progress.get((namespace, name)))
            if news is not None:
                _progress[(namespace, name)] = news
                _queue.add((DATAVOLUME, namespace, name))


# --- Admission ---------------------------------------------------------------------------------------------


@kopf.on.validate(names.GROUP, names.VERSION, names.DATAVOLUMES, id="datavolume-validate",
                  operations=["CREATE", "UPDATE"])
def validate(body: kopf.Body, old: kopf.Body | None, operation: str, **_: Any) -> None:
    dv = dict(body)
    existing = None
    if operation == "CREATE" and meta(dv).get("name"):
        namespace, name = meta(dv).get("namespace", ""), meta(dv)["name"]
        existing = kube().get(_core("persistentvolumeclaims", namespace=namespace, name=name))
        _latest.fetched(_CLAIM, namespace, name, existing)  # the DataVolume's first reconcile needs not ask again
    try:
        validate_datavolume(dv, old=dict(old) if operation == "UPDATE" and old else None, existing_pvc=existing,
                            feature_gates=_gates(_recent.get("config", _config)))
    except Invalid as error:
        raise kopf.AdmissionError(error.message, code=422) from None


# --- CDI, CDIConfig, StorageProfiles -----------------------------------------------------------------------


def reconcile_cluster_config() -> None:
    """Exactly one CDI CR, ``CDIConfig/config`` with a full status, and a StorageProfile per StorageClass."""
    k = kube()
    if not k.list(_cdi(names.CDIS)):
        k.create(_cdi(names.CDIS), {"apiVersion": names.API_VERSION, "kind": names.CDI, "metadata": {"name": "cdi"},
                                    "spec": {"config": {"featureGates": _settings.default_gates}}})
    for cdi in k.list(_cdi(names.CDIS)):
        if (cdi.get("status") or {}).get("phase") != "Deployed":
            k.patch(_cdi(names.CDIS, name=meta(cdi)["name"], subresource="status"), {"status": {"phase": "Deployed"}})
    config = _config()
    if config is None:
        cdi_spec = (_cdi_resource() or {}).get("spec") or {}
        config = k.create(_cdi(names.CDICONFIGS), {
            "apiVersion": names.API_VERSION, "kind": names.CDICONFIG, "metadata": {"name": names.CDICONFIG_NAME},
            "spec": cdi_spec.get("config") or {}}) or _config()
    classes = _storage_classes()
    status = cdi_config_status(config, storage_classes=classes, upload_proxy_url=_settings.upload_proxy_url)
    if (config or {}).get("status") != status:
        k.patch(_cdi(names.CDICONFIGS, name=names.CDICONFIG_NAME, subresource="status"), {"status": status})
    profiles = {meta(p)["name"]: p for p in k.list(_cdi(names.STORAGEPROFILES))}
    for sc in classes:
        existing = profiles.pop(meta(sc)["name"], None)
        desired = storage_profile(sc, existing=existing)
        if existing is None:
            k.create(_cdi(names.STORAGEPROFILES), {key: v for key, v in desired.items() if key != "status"})
        if (existing or {}).get("status") != desired["status"]:
            k.patch(_cdi(names.STORAGEPROFILES, name=meta(sc)["name"], subresource="status"),
                    {"status": desired["status"]})
    for orphan in profiles:  # its StorageClass is gone
        k.delete(_cdi(names.STORAGEPROFILES, name=orphan))


@kopf.on.event("storage.k8s.io", "v1", "storageclasses")
async def storage_class_changed(**_: Any) -> None:
    await _cluster_config_changed()


@kopf.on.event(names.GROUP, names.VERSION, names.CDICONFIGS)
async def config_changed(**_: Any) -> None:
    await _cluster_config_changed()


async def _cluster_config_changed() -> None:
    _recent.forget()  # at once: a DataVolume created right after the change must not be rendered with the old one
    await asyncio.to_thread(reconcile_cluster_config)
    _recent.forget()  # again: what reconciles read next includes the status just written


@kopf.on.event(names.GROUP, names.VERSION, names.STORAGEPROFILES)
async def storage_profile_changed(**_: Any) -> None:
    _recent.forget()  # a user's claimPropertySets apply to the next DataVolume


class _NothingToDiff(kopf.AnnotationsDiffBaseStorage):
    """Every handler here takes raw watch events or admission reviews, so kopf's change detection has nothing to
    detect; an empty essence spares it deep-copying each object on each event to diff it with the last one."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    global _settings
    _settings = Settings.from_env()
    settings.posting.level = logging.INFO
    settings.persistence.diffbase_storage = _NothingToDiff()
    env = os.environ
    port = env.get(names.ENV_WEBHOOK_PORT)
    if port:
        host = env.get(names.ENV_WEBHOOK_HOST) or "localhost"
        cert, key, ca = env.get(names.ENV_WEBHOOK_CERT), env.get(names.ENV_WEBHOOK_KEY), env.get(names.ENV_WEBHOOK_CA)
        if not cert:  # none mounted: our own, whose CA kopf puts into the webhook configuration it manages
            cert, key, ca = map(str, certs.write_serving_files(Path(tempfile.mkdtemp(prefix="cdi-webhook-")),
                                                               host=host, ca_name="cdi-controller webhook CA"))
        settings.admission.server = kopf.WebhookServer(
            addr="0.0.0.0", port=int(port), host=host, certfile=cert, pkeyfile=key, cafile=ca or None)  # noqa: S104
        settings.admission.managed = names.GROUP  # webhook datavolume-validate.cdi.kubevirt.io, as CDI names it
    await asyncio.to_thread(reconcile_cluster_config)
    executor = ThreadPoolExecutor(RECONCILE_WORKERS, thread_name_prefix="reconcile")
    memo["tasks"] = [asyncio.create_task(_queue.serve(_reconcile, workers=RECONCILE_WORKERS, executor=executor)),
                     asyncio.create_task(_poll_progress())]


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.get("tasks") or []:
        task.cancel()


def main() -> None:
    """``cdi-controller``: watch the whole cluster; one controller at a time, no peering objects needed."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # kopf logs "Handler ... succeeded." at INFO for every watch event it hands over: 30 lines per DataVolume,
    # which say nothing. Its warnings and errors (a handler that failed) still show.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # A line per admission review, formatted on the loop while the API server waits for the answer: a tenth
    # of the webhook's time.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    kopf.run(clusterwide=True, standalone=True)

