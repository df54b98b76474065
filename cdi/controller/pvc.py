"""The PVC a DataVolume asks for, and what to do with a PVC that already has its name (cdi-facts §1.5, §2, §5.2).

KubeVirt assumes PVC name == DV name and a controller ownerReference to the DV (§9.3); the importer learns
everything from the PVC's annotations, so the rendered PVC is the whole controller->importer contract.
"""

from __future__ import annotations

import copy
import enum
import math
from collections.abc import Iterable
from decimal import Decimal

from cdi.api import names
from cdi.api.spec import (
    MIB, Obj, annotations, content_type, is_controlled_by, labels, meta, quantity_bytes, requested_size,
    source_kind, spec_of, target,
)
from cdi.controller.config import default_storage_class, filesystem_overhead


class ClaimNotValid(ValueError):
    """The DataVolume cannot be turned into a PVC now; the message goes into an ErrClaimNotValid event."""


def owner_reference(obj: Obj, *, kind: str, api_version: str) -> Obj:
    return {"apiVersion": api_version, "kind": kind, "name": meta(obj).get("name", ""),
            "uid": meta(obj).get("uid", ""), "controller": True, "blockOwnerDeletion": True}


def render_pvc(
    dv: Obj, *, storage_classes: Iterable[Obj] = (), storage_profiles: Iterable[Obj] = (),
    cdi_config_status: Obj | None = None, persistent_volumes: Iterable[Obj] = (),
) -> Obj:
    """The PVC to create for ``dv``. Raises :class:`ClaimNotValid` when ``spec.storage`` cannot be completed."""
    spec = spec_of(dv)
    config_status = cdi_config_status or {}
    field, target_spec = target(spec)
    if field == "pvc":
        claim_spec = copy.deepcopy(target_spec)
    else:
        claim_spec = _complete_storage(spec, storage_classes=list(storage_classes),
                                       profiles={meta(p).get("name"): p for p in storage_profiles},
                                       config_status=config_status, persistent_volumes=list(persistent_volumes))
    filesystem = claim_spec.get("volumeMode", names.VOLUME_MODE_FILESYSTEM) == names.VOLUME_MODE_FILESYSTEM
    pvc_labels = {names.LABEL_APP: names.APP, **labels(dv)}
    if filesystem:
        pvc_labels[names.LABEL_FILLING_UP_ALERT] = "disabled"
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": meta(dv).get("name", ""), "namespace": meta(dv).get("namespace", ""),
            "labels": pvc_labels,
            "annotations": _claim_annotations(dv, spec, config_status=config_status),
            "ownerReferences": [owner_reference(dv, kind=names.DATAVOLUME, api_version=names.API_VERSION)],
        },
        "spec": claim_spec,
    }


def _claim_annotations(dv: Obj, spec: Obj, *, config_status: Obj) -> dict[str, str]:
    result = {k: v for k, v in annotations(dv).items() if k != names.ANN_POPULATED_FOR}
    preallocation = spec.get("preallocation")
    if preallocation is None:
        preallocation = bool(config_status.get("preallocation", False))
    result.update({
        names.ANN_POD_RESTARTS: "0",
        names.ANN_CONTENT_TYPE: content_type(spec),
        names.ANN_PREALLOCATION_REQUESTED: str(bool(preallocation)).lower(),
        names.ANN_CREATED_FOR_DATAVOLUME: meta(dv).get("uid", ""),
        names.ANN_USE_POPULATOR: "false",  # the legacy path: the importer writes into this very PVC
    })
    if spec.get("priorityClassName"):
        result[names.ANN_PRIORITY_CLASS] = spec["priorityClassName"]
    if spec.get("serviceAccountName"):
        result[names.ANN_SERVICE_ACCOUNT] = spec["serviceAccountName"]
    kind = source_kind(spec)
    if kind == "upload":
        result[names.ANN_UPLOAD_TARGET] = ""
    elif kind in names.IMPORT_SOURCES:
        result.update(source_annotations(kind, spec["source"][kind]))
    return result


def source_annotations(kind: str, source: Obj) -> dict[str, str]:
    """The PVC annotations that tell the import controller where the data comes from (§2.1)."""
    result = {names.ANN_SOURCE: "none" if kind == "blank" else kind}
    if kind == "registry":
        result[names.ANN_ENDPOINT] = source.get("url") or source.get("imageStream", "")
        if source.get("imageStream"):
            result[names.ANN_REGISTRY_IMAGE_STREAM] = "true"
        if source.get("pullMethod"):
            result[names.ANN_REGISTRY_IMPORT_METHOD] = source["pullMethod"]
        if (source.get("platform") or {}).get("architecture"):
            result[names.ANN_REGISTRY_IMAGE_ARCHITECTURE] = source["platform"]["architecture"]
    elif kind != "blank":
        result[names.ANN_ENDPOINT] = source.get("url", "")
    plain = {"secretRef": names.ANN_SECRET, "certConfigMap": names.ANN_CERT_CONFIGMAP,
             "checksum": names.ANN_CHECKSUM, "diskId": names.ANN_DISK_ID, "uuid": names.ANN_UUID,
             "backingFile": names.ANN_BACKING_FILE, "thumbprint": names.ANN_THUMBPRINT,
             "initImageURL": names.ANN_VDDK_INIT_IMAGE_URL, "extraArgs": names.ANN_VDDK_EXTRA_ARGS}
    result.update({plain[key]: str(value) for key, value in source.items() if key in plain and value})
    if source.get("insecureSkipVerify"):
        result[names.ANN_INSECURE_SKIP_VERIFY] = "true"
    for i, line in enumerate(source.get("extraHeaders") or []):
        result[f"{names.ANN_EXTRA_HEADERS_PREFIX}{i}"] = line
    for i, secret in enumerate(source.get("secretExtraHeaders") or []):
        result[f"{names.ANN_SECRET_EXTRA_HEADERS_PREFIX}{i}"] = secret
    return result


def _complete_storage(spec: Obj, *, storage_classes: list[Obj], profiles: dict[str, Obj], config_status: Obj,
                      persistent_volumes: list[Obj]) -> Obj:
    """``spec.storage`` with CDI's defaults filled in (§1.5 steps 1-6)."""
    claim = copy.deepcopy(spec.get("storage") or {})
    if claim.get("volumeMode") == names.VOLUME_MODE_FROM_STORAGE_PROFILE:
        del claim["volumeMode"]
    if content_type(spec) == names.CONTENT_ARCHIVE:
        if claim.get("volumeMode") == names.VOLUME_MODE_BLOCK:
            raise ClaimNotValid("ContentType Archive cannot have block volumeMode")
        claim["volumeMode"] = names.VOLUME_MODE_FILESYSTEM
    class_name = claim.get("storageClassName")
    if class_name is None:
        default = default_storage_class(storage_classes, content_type=content_type(spec))
        if default is not None:
            class_name = claim["storageClassName"] = meta(default).get("name", "")
    if class_name:
        _complete_from_profile(claim, profiles.get(class_name), class_name=class_name)
    else:
        _complete_from_volumes(claim, persistent_volumes)
    size = requested_size(claim)
    if size is not None:
        claim["resources"]["requests"]["storage"] = _claim_size(
            size, filesystem=claim.get("volumeMode", names.VOLUME_MODE_FILESYSTEM) == names.VOLUME_MODE_FILESYSTEM,
            overhead=filesystem_overhead(config_status, class_name),
            minimum=annotations(profiles.get(class_name or "") or {}).get(names.ANN_MINIMUM_PVC_SIZE))
    return claim


def _complete_from_profile(claim: Obj, profile: Obj | None, *, class_name: str) -> None:
    sets = ((profile or {}).get("status") or {}).get("claimPropertySets") or []
    modes, volume_mode = claim.get("accessModes"), claim.get("volumeMode")
    if modes and volume_mode:
        return
    if modes:
        chosen = next((s for s in sets if set(modes) & set(s.get("accessModes") or [])), None)
    else:
        chosen = next((s for s in sets if not volume_mode or s.get("volumeMode") == volume_mode), None)
        if chosen is None or not chosen.get("accessModes"):
            raise ClaimNotValid(f"DataVolume.storage spec is missing accessMode and cannot get access mode "
                                f"from StorageProfile {class_name}")
        claim["accessModes"] = list(chosen["accessModes"])
    if not volume_mode and chosen is not None and chosen.get("volumeMode"):
        claim["volumeMode"] = chosen["volumeMode"]


def _complete_from_volumes(claim: Obj, volumes: list[Obj]) -> None:
    """Without any StorageClass, an Available class-less PV that fits tells what the claim can ask for."""
    size = requested_size(claim)
    wanted = quantity_bytes(size) if size is not None else 0
    for pv in volumes:
        pv_spec = pv.get("spec") or {}
        if ((pv.get("status") or {}).get("phase") == "Available" and not pv_spec.get("storageClassName")
                and quantity_bytes(str((pv_spec.get("capacity") or {}).get("storage", "0"))) >= wanted
                and (not claim.get("volumeMode") or pv_spec.get("volumeMode", names.VOLUME_MODE_FILESYSTEM)
                     == claim["volumeMode"])):
            claim.setdefault("accessModes", list(pv_spec.get("accessModes") or []))
            claim.setdefault("volumeMode", pv_spec.get("volumeMode", names.VOLUME_MODE_FILESYSTEM))
            break
    if not claim.get("accessModes"):
        raise ClaimNotValid("PVC spec is missing accessMode and no storageClass to choose profile")


def _claim_size(size: str, *, filesystem: bool, overhead: str, minimum: str | None) -> str:
    """The request: a Filesystem volume is inflated so the disk image still fits after the filesystem's own
    overhead; a StorageProfile minimum raises it."""
    wanted = quantity_bytes(size)
    if filesystem:
        rounded = math.ceil(wanted / MIB) * MIB
        wanted = math.ceil(rounded * (1 + Decimal(overhead)))
        size = str(wanted)
    if minimum and quantity_bytes(minimum) > wanted:
        return minimum
    return size


class ClaimAction(enum.Enum):
    """What the DataVolume controller does about the PVC that has (or lacks) the DataVolume's name."""

    CREATE = "create"  # no PVC yet
    OURS = "ours"  # controlled by this DataVolume: keep reconciling it
    ADOPT = "adopt"  # existing PVC the DV may take over without populating it
    CONFLICT = "conflict"  # someone else's PVC: ErrResourceExists
    DELETING = "deleting"  # being deleted: ErrResourceMarkedForDeletion


def claim_action(dv: Obj, pvc: Obj | None, *, feature_gates: Iterable[str] = ()) -> ClaimAction:
    if pvc is None:
        return ClaimAction.CREATE
    if meta(pvc).get("deletionTimestamp"):
        return ClaimAction.DELETING
    if is_controlled_by(pvc, kind=names.DATAVOLUME, uid=meta(dv).get("uid")):
        return ClaimAction.OURS
    adoption = annotations(dv).get(names.ANN_ALLOW_CLAIM_ADOPTION)
    if annotations(pvc).get(names.ANN_POPULATED_FOR) == meta(dv).get("name") or adoption == "true" or (
            names.GATE_CLAIM_ADOPTION in feature_gates and adoption != "false"):
        if not is_controlled_by(pvc, kind=names.DATAVOLUME):
            return ClaimAction.ADOPT
    return ClaimAction.CONFLICT


def conflict_message(pvc: Obj) -> str:
    return f'Resource "{meta(pvc).get("name", "")}" already exists and is not managed by DataVolume'


def adopted_pvc_patch(dv: Obj, pvc: Obj) -> Obj:
    """Merge patch that makes ``dv`` the controller of an adopted or pre-populated PVC."""
    refs = [r for r in meta(pvc).get("ownerReferences") or [] if not r.get("controller")]
    refs.append(owner_reference(dv, kind=names.DATAVOLUME, api_version=names.API_VERSION))
    return {"metadata": {"ownerReferences": refs}}


def requires_work(dv: Obj, pvc: Obj) -> bool:
    """False for a PVC the DataVolume adopted or that was populated for it: there is nothing to import."""
    pvc_annotations = annotations(pvc)
    if pvc_annotations.get(names.ANN_POPULATED_FOR) == meta(dv).get("name"):
        return False
    return pvc_annotations.get(names.ANN_CREATED_FOR_DATAVOLUME) == meta(dv).get("uid")
