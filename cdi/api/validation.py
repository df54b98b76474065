"""Admission of DataVolumes with CDI's messages (cdi-facts §1.1 schema rules, §1.8 webhook rules).

One function answers what the API server (schema, decoding) and CDI's validating webhook together answer,
in their order, so a manifest is accepted or rejected here exactly as a cluster running CDI would do it.
Rejection raises :class:`Invalid` with the first problem found, as CDI's webhook stops at the first cause.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import urlsplit

from cdi.api import names
from cdi.api.spec import (
    MIB, QUANTITY_PATTERN, Obj, annotations, external_population_ref, is_clone, is_controlled_by,
    is_quantity, meta, pod_resource_override, quantity_bytes, requested_size, source_kinds, spec_of, target,
)
from importer.checksum import Expected
from importer.errors import ImportFailed

MAX_NAME = 253
_URL_SCHEMES = ("http", "https", "gs")
_REGISTRY_SCHEMES = ("docker", "oci-archive")
_MULTI_STAGE_SOURCES = ("vddk", "imageio")
# Fields the CRD schema requires inside each source (§1.1); CDI's webhook never sees objects missing them.
_SCHEMA_REQUIRED = {"http": ("url",), "s3": ("url",), "gcs": ("url",), "imageio": ("url", "diskId"),
                    "pvc": ("name", "namespace"), "snapshot": ("name", "namespace")}


class Invalid(ValueError):
    """A rejected DataVolume; ``message`` is the text CDI's tests match."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def validate_datavolume(
    dv: Obj, *, old: Obj | None = None, existing_pvc: Obj | None = None,
    feature_gates: Collection[str] = (),
) -> None:
    """Raise :class:`Invalid` unless ``dv`` may be created (``old`` is None) or may replace ``old``.

    ``existing_pvc`` is the PVC with the DataVolume's name in its namespace, if there is one at create time.
    """
    _check_schema(dv)
    _check_our_annotations(annotations(dv))
    spec = spec_of(dv)
    if old is not None:
        _check_update(spec, spec_of(old))
        return
    _check_spec(spec)
    if existing_pvc is not None:
        _check_existing_claim(dv, existing_pvc, feature_gates=feature_gates)


def _check_schema(dv: Obj) -> None:
    metadata = meta(dv)
    if not metadata.get("name") and not metadata.get("generateName"):
        raise Invalid("metadata.name: Required value: name or generateName is required")
    if len(metadata.get("name") or "") > MAX_NAME:
        raise Invalid("Name cannot be longer than 253 characters")
    if dv.get("spec") is None:
        raise Invalid('spec: Required value: missing required field "spec"')
    spec = spec_of(dv)
    for kind, fields in _SCHEMA_REQUIRED.items():
        source = (spec.get("source") or {}).get(kind)
        for name in fields:
            if source is not None and not source.get(name):
                raise Invalid(f"spec.source.{kind}.{name}: Required value")
    for field in ("pvc", "storage"):
        size = requested_size(spec.get(field) or {})
        if size is not None and not is_quantity(size):
            raise Invalid(f'spec.{field}.resources.requests.storage: Invalid value: "{size}": '
                          f"quantities must match the regular expression '{QUANTITY_PATTERN}'")


def _check_our_annotations(dv_annotations: dict[str, str]) -> None:
    """The per-DataVolume overrides we add to CDI's API are checked here, not found broken by the controller."""
    restarts = dv_annotations.get(names.ANN_MAX_RESTARTS)
    if restarts is not None and not restarts.strip().isdigit():
        raise Invalid(f"annotation {names.ANN_MAX_RESTARTS} must be a whole number, not {restarts!r}")
    resources = dv_annotations.get(names.ANN_POD_RESOURCES)
    if resources is not None:
        try:
            pod_resource_override(resources)
        except ValueError as error:
            raise Invalid(f"annotation {names.ANN_POD_RESOURCES}: {error}") from None


def _check_spec(spec: Obj) -> None:
    if "pvc" not in spec and "storage" not in spec:
        raise Invalid("Missing Data volume PVC")
    if "pvc" in spec and "storage" in spec:
        raise Invalid("Duplicate storage definition, both target storage and target pvc defined")
    field, target_spec = target(spec)
    label = "PVC" if field == "pvc" else "Storage"
    if field == "pvc" or not is_clone(spec) or requested_size(target_spec) is not None:
        _check_size(target_spec, label=label)
    if len(target_spec.get("storageClassName") or "") > MAX_NAME:
        raise Invalid(f"spec.{field}.storageClassName cannot be longer than 253 characters")
    _check_access_modes(target_spec.get("accessModes") or [], field=field)
    _check_sources(spec)


def _check_size(target_spec: Obj, *, label: str) -> None:
    size = requested_size(target_spec)
    if size is None:
        if "resources" not in target_spec:
            raise Invalid(f"{label} size is missing: resources.requests.storage is required")
        raise Invalid(f"{label} size is missing")
    try:
        size_bytes = quantity_bytes(size)
    except ImportFailed as error:
        raise Invalid(f"{label} size {size!r} is not a byte count: {error.message}") from None
    if size_bytes <= 0:
        raise Invalid(f"{label} size can't be equal or less than zero")
    if size_bytes < MIB:
        raise Invalid(f"{label} size should be at least 1MiB")


def _check_access_modes(modes: list[str], *, field: str) -> None:
    # spec.storage may leave access modes to the StorageProfile; spec.pvc is used verbatim, so it needs one.
    if field == "pvc":
        if not modes:
            raise Invalid("spec.pvc.accessModes: Required value: at least 1 access mode is required")
        if len(modes) > 1:
            raise Invalid("PVC multiple accessModes")
    for mode in modes:
        if mode not in names.ACCESS_MODES:
            supported = ", ".join(f'"{m}"' for m in names.ACCESS_MODES)
            raise Invalid(f'spec.{field}.accessModes: Unsupported value: "{mode}": supported values: {supported}')


def _check_sources(spec: Obj) -> None:
    has_source, has_ref = "source" in spec, "sourceRef" in spec
    if has_source == has_ref:
        if not has_source and external_population_ref(spec) is not None:
            _check_external_population(spec)
            return
        raise Invalid("Data volume should have either Source or SourceRef, or be externally populated")
    if has_ref:
        _check_source_ref(spec["sourceRef"])
        return
    if external_population_ref(spec) is not None:
        raise Invalid("External population is incompatible with Source and SourceRef")
    kinds = source_kinds(spec)
    if not kinds:
        raise Invalid("Missing Data volume source")
    if len(kinds) > 1:
        raise Invalid("Multiple Data volume sources")
    content = spec.get("contentType", names.CONTENT_KUBEVIRT)
    if content not in names.CONTENT_TYPES:
        raise Invalid("ContentType not one of: kubevirt, archive")
    kind = kinds[0]
    source = spec["source"][kind]
    if kind == "blank" and content == names.CONTENT_ARCHIVE:
        raise Invalid("SourceType cannot be blank and the contentType be archive")
    if kind == "registry":
        _check_registry(source, content=content)
    elif kind in ("http", "s3", "gcs"):
        _check_url(source.get("url") or "")
        if source.get("checksum"):
            _check_checksum(source["checksum"])
    elif kind == "imageio":
        _check_imageio(source)
    elif kind == "vddk":
        _check_vddk(source)


def _check_url(url: str) -> None:
    if not url:
        raise Invalid("spec.source source URL is empty")
    try:
        parts = urlsplit(url)
    except ValueError:
        raise Invalid(f"spec.source Invalid source URL: {url}") from None
    if not parts.scheme or any(c.isspace() for c in url):
        raise Invalid(f"spec.source Invalid source URL: {url}")
    if parts.scheme not in _URL_SCHEMES:
        raise Invalid(f"spec.source Invalid source URL scheme: {url}")


def _check_checksum(checksum: str) -> None:
    try:
        Expected(checksum)
    except ImportFailed as error:
        raise Invalid(f"Invalid checksum format: {error.message}") from None


def _check_registry(source: Obj, *, content: str) -> None:
    if content != names.CONTENT_KUBEVIRT:
        raise Invalid("ContentType must be kubevirt when Source is Registry")
    url, stream = source.get("url"), source.get("imageStream")
    if bool(url) == bool(stream):
        raise Invalid("Source registry should have either URL or ImageStream")
    if url and urlsplit(url).scheme not in _REGISTRY_SCHEMES:
        raise Invalid(f"Illegal registry source URL scheme {url}")
    method = source.get("pullMethod", "")
    if method not in ("pod", "node", ""):
        raise Invalid(f'ImportMethod {method} is neither pod, node or ""')
    if stream and method != "node":
        raise Invalid("Source registry ImageStream is supported only with node pull import method")


def _check_imageio(source: Obj) -> None:
    _check_url(source.get("url") or "")
    if not source.get("secretRef"):  # url and diskId are the schema's to require
        raise Invalid("spec.source.Imageio source Imageio is not valid")
    if not source.get("certConfigMap") and not source.get("insecureSkipVerify"):
        raise Invalid("spec.source.Imageio source Imageio requires CertConfigMap or InsecureSkipVerify")


def _check_vddk(source: Obj) -> None:
    _check_url(source.get("url") or "")
    if not all(source.get(key) for key in ("uuid", "backingFile", "thumbprint", "secretRef")):
        raise Invalid("spec.source.VDDK source VDDK is not valid")


def _check_source_ref(ref: Obj) -> None:
    if not ref.get("kind"):
        raise Invalid("Missing sourceRef kind")
    if ref["kind"] != names.DATASOURCE:
        raise Invalid(f"Unsupported sourceRef kind {ref['kind']}, currently only DataSource is supported")
    if not ref.get("name"):
        raise Invalid("Missing sourceRef name")


def _check_external_population(spec: Obj) -> None:
    _, target_spec = target(spec)
    ref, local = target_spec.get("dataSourceRef"), target_spec.get("dataSource")
    if ref and local and any(ref.get(k) != local.get(k) for k in ("apiGroup", "kind", "name")):
        raise Invalid("DataSourceRef and DataSource must match")


def _check_update(spec: Obj, old_spec: Obj) -> None:
    if spec == old_spec:
        return
    # Multi-stage (warm) imports add checkpoints to a running DataVolume; nothing else may change.
    stage_keys = ("checkpoints", "finalCheckpoint")
    rest, old_rest = ({k: v for k, v in s.items() if k not in stage_keys} for s in (spec, old_spec))
    multi_stage = any(kind in (spec.get("source") or {}) for kind in _MULTI_STAGE_SOURCES)
    if not (multi_stage and spec.get("checkpoints") and rest == old_rest):
        raise Invalid("Cannot update DataVolume Spec")


def _check_existing_claim(dv: Obj, pvc: Obj, *, feature_gates: Collection[str]) -> None:
    """A same-name PVC may only be taken over when it was made for this DataVolume or adoption is allowed."""
    name = meta(dv).get("name", "")
    adoption = annotations(dv).get(names.ANN_ALLOW_CLAIM_ADOPTION)
    if (annotations(pvc).get(names.ANN_POPULATED_FOR) == name
            or adoption == "true"
            or (names.GATE_CLAIM_ADOPTION in feature_gates and adoption != "false")
            or is_controlled_by(pvc, kind=names.DATAVOLUME)):
        return
    raise Invalid(f"Destination PVC {meta(pvc).get('namespace', '')}/{meta(pvc).get('name', '')} already exists")

