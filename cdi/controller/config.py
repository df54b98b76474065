"""Cluster-wide settings as pure functions: CDIConfig status, StorageProfiles, default classes, overhead, and
the upload server's lifetime from the CDI CR's certConfig.

KubeVirt refuses to size volumes until ``CDIConfig/config`` has a filesystem overhead for every
StorageClass, and reads access modes from StorageProfiles (cdi-facts §5.9, §5.10, §9.1).
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterable
from dataclasses import dataclass

from cdi.api import names
from cdi.api.duration import parse_duration
from cdi.api.spec import Obj, annotations, meta, pod_resource_override

# Built-in claim property sets by provisioner (§5.10); ours first: the embedded local cluster's provisioner.
_RWO, _RWX = "ReadWriteOnce", "ReadWriteMany"
_FS, _BLOCK = names.VOLUME_MODE_FILESYSTEM, names.VOLUME_MODE_BLOCK
PROVISIONER_DEFAULTS: dict[str, tuple[list[Obj], str | None]] = {
    "localkube.dev/local": ([{"accessModes": [_RWO], "volumeMode": _FS},
                             {"accessModes": [_RWO], "volumeMode": _BLOCK}], "copy"),
    "kubevirt.io.hostpath-provisioner": ([{"accessModes": [_RWO], "volumeMode": _FS}], None),
    "kubevirt.io/hostpath-provisioner": ([{"accessModes": [_RWO], "volumeMode": _FS}], None),
    "rbd.csi.ceph.com": ([{"accessModes": [_RWX], "volumeMode": _BLOCK}, {"accessModes": [_RWO], "volumeMode": _BLOCK},
                          {"accessModes": [_RWO], "volumeMode": _FS}], None),
    "ebs.csi.aws.com": ([{"accessModes": [_RWO], "volumeMode": _BLOCK}], None),
    "nfs.csi.k8s.io": ([{"accessModes": [_RWX], "volumeMode": _FS}], None),
    "topolvm.io": ([{"accessModes": [_RWO], "volumeMode": _BLOCK}, {"accessModes": [_RWO], "volumeMode": _FS}],
                   "copy"),
}
ANN_CLONE_STRATEGY = names.GROUP + "/clone-strategy"


def cdi_config_status(config: Obj | None, *, storage_classes: Iterable[Obj], upload_proxy_url: str = "") -> Obj:
    """``CDIConfig.status`` from its spec and the StorageClasses that exist now."""
    spec = (config or {}).get("spec") or {}
    class_names = [meta(sc).get("name", "") for sc in storage_classes]
    overhead = spec.get("filesystemOverhead") or {}
    global_overhead = overhead.get("global") or names.DEFAULT_FILESYSTEM_OVERHEAD
    per_class = overhead.get("storageClass") or {}
    status: Obj = {
        "uploadProxyURL": spec.get("uploadProxyURLOverride") or upload_proxy_url,
        "scratchSpaceStorageClass": spec.get("scratchSpaceStorageClass", "")
        if spec.get("scratchSpaceStorageClass") in class_names else "",
        "defaultPodResourceRequirements": _merged_resources(names.DEFAULT_POD_RESOURCES,
                                                            spec.get("podResourceRequirements") or {}),
        "filesystemOverhead": {"global": global_overhead,
                               "storageClass": {name: per_class.get(name, global_overhead) for name in class_names}},
        "preallocation": bool(spec.get("preallocation", False)),
    }
    for key in ("importProxy", "imagePullSecrets"):
        if spec.get(key):
            status[key] = copy.deepcopy(spec[key])
    return status


def _merged_resources(defaults: Obj, override: Obj) -> Obj:
    """Resource requirements where each set value of ``override`` replaces the default for that resource."""
    merged = copy.deepcopy(defaults)
    for part in ("limits", "requests"):
        merged.setdefault(part, {}).update(override.get(part) or {})
    return merged


def filesystem_overhead(config_status: Obj, storage_class: str | None) -> str:
    overhead = config_status.get("filesystemOverhead") or {}
    return (overhead.get("storageClass") or {}).get(storage_class or "") or overhead.get("global") \
        or names.DEFAULT_FILESYSTEM_OVERHEAD


def pod_resources(config_status: Obj, pvc: Obj) -> Obj:
    """The importer container's resources: CDIConfig's defaults, replaced per resource by the PVC annotation."""
    defaults = config_status.get("defaultPodResourceRequirements") or names.DEFAULT_POD_RESOURCES
    try:
        # Admission checked the DataVolume's value; a PVC edited by hand afterwards falls back to the defaults.
        override = pod_resource_override(annotations(pvc).get(names.ANN_POD_RESOURCES) or "{}")
    except ValueError:
        override = {}
    return _merged_resources(defaults, override)


def max_restarts(config: Obj | None, pvc: Obj) -> int:
    """Transient importer failures tolerated before the DataVolume fails: PVC (from the DV), CDIConfig, 5."""
    for source in (pvc, config or {}):
        value = annotations(source).get(names.ANN_MAX_RESTARTS)
        if value is not None and value.strip().isdigit():
            return int(value)
    return names.DEFAULT_MAX_RESTARTS


@dataclass(frozen=True)
class UploadLifetimes:
    deadline: datetime.timedelta  # how long an upload server waits for an upload before a fresh one replaces it
    server_certificate: datetime.timedelta  # how long its serving certificate is valid: past the deadline


def upload_lifetimes(cdi: Obj | None) -> UploadLifetimes:
    """From the CDI CR's ``spec.certConfig``, as CDI's upload controller: the server stops when the first of the
    server and client certificates is due for renewal (``duration - renewBefore``), so a fresh pod with fresh
    certificates takes over before either runs out; the server certificate is issued for its full ``duration``."""
    cert_config = ((cdi or {}).get("spec") or {}).get("certConfig")
    entries = cert_config if isinstance(cert_config, dict) else {}
    server_duration, server_renew = _certificate(entries.get("server"))
    client_duration, client_renew = _certificate(entries.get("client"))
    return UploadLifetimes(deadline=min(server_duration - server_renew, client_duration - client_renew),
                           server_certificate=server_duration)


def _certificate(entry: object) -> tuple[datetime.timedelta, datetime.timedelta]:
    """One certificate's (duration, renewBefore): a field left out takes CDI's default; an entry with a value Go
    would not parse, or that leaves no time before renewal, is ignored whole, as mixing it with defaults could
    give a lifetime nobody asked for."""
    defaults = names.DEFAULT_CERT_DURATION, names.DEFAULT_CERT_RENEW_BEFORE
    fields = entry if isinstance(entry, dict) else {}
    try:
        duration = _duration(fields.get("duration"), default=names.DEFAULT_CERT_DURATION)
        renew = _duration(fields.get("renewBefore"), default=names.DEFAULT_CERT_RENEW_BEFORE)
    except ValueError:
        return defaults
    if renew < datetime.timedelta(0) or duration <= renew:
        return defaults
    return duration, renew


def _duration(value: object, *, default: datetime.timedelta) -> datetime.timedelta:
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValueError(f"not a duration: {value!r}")
    return parse_duration(value)


def storage_profile(storage_class: Obj, *, existing: Obj | None = None, has_snapshot_class: bool = False) -> Obj:
    """The StorageProfile of a StorageClass: the user's spec kept, status from it or the provisioner's defaults."""
    name = meta(storage_class).get("name", "")
    provisioner = storage_class.get("provisioner", "")
    spec = copy.deepcopy((existing or {}).get("spec") or {})
    claim_sets, advised_strategy = PROVISIONER_DEFAULTS.get(provisioner, ([], None))
    strategy = (spec.get("cloneStrategy") or annotations(storage_class).get(ANN_CLONE_STRATEGY)
                or advised_strategy or ("snapshot" if has_snapshot_class else "copy"))
    if strategy == "snapshot" and not has_snapshot_class:
        strategy = "copy"
    status: Obj = {"storageClass": name, "provisioner": provisioner,
                   "claimPropertySets": copy.deepcopy(spec.get("claimPropertySets") or claim_sets),
                   "cloneStrategy": strategy}
    for key in ("dataImportCronSourceFormat", "snapshotClass"):
        if spec.get(key):
            status[key] = spec[key]
    return {"apiVersion": names.API_VERSION, "kind": names.STORAGEPROFILE,
            "metadata": {"name": name, "labels": {names.LABEL_APP: names.APP}}, "spec": spec, "status": status}


def default_storage_class(storage_classes: Iterable[Obj], *, content_type: str) -> Obj | None:
    """The class a ``spec.storage`` without a class gets: default virt class for disks, else the default class.

    Among several defaults the newest wins, then the lower name (§1.5).
    """
    classes = list(storage_classes)
    keys = ([names.ANN_DEFAULT_VIRT_CLASS] if content_type == names.CONTENT_KUBEVIRT else []) + [names.ANN_DEFAULT_CLASS]
    for key in keys:
        marked = [sc for sc in classes if annotations(sc).get(key) == "true"]
        if marked:
            # max() keeps the first of equals, so sorting by name first lets the lower name win a tie.
            by_name = sorted(marked, key=lambda sc: meta(sc).get("name", ""))
            return max(by_name, key=lambda sc: meta(sc).get("creationTimestamp") or "")
    return None
