"""CDI's accept/reject table: its webhook e2e fixtures and shipped examples, rewritten as our own manifests.

Each manifest under tests/data/manifests/datavolumes mirrors one CDI case; the expected text is the part of
CDI's message its own tests match (None: admitted). The unit tests run the table through the validation
function, the e2e tests through kubectl, the CRD schema and the webhook.
"""

from __future__ import annotations

from pathlib import Path

MANIFESTS = Path(__file__).resolve().parent.parent / "data" / "manifests" / "datavolumes"

ACCEPTED = None
Expected = str | tuple[str, ...] | None  # None: admitted; else the text of the refusal, or its accepted forms
TABLE: dict[str, Expected] = {
    # CDI tests/manifests
    "accept-http-pvc.yaml": ACCEPTED,
    "accept-imageio.yaml": ACCEPTED,
    "accept-leading-zero-size.yaml": ACCEPTED,
    "accept-vddk.yaml": ACCEPTED,
    "reject-zero-size.yaml": "PVC size can't be equal or less than zero",
    "reject-blank-archive.yaml": "SourceType cannot be blank and the contentType be archive",
    # The CRD's enum answers first when the API server checks the schema, as with CDI's own CRD.
    "reject-blank-bad-content-type.yaml": ("ContentType not one of: kubevirt, archive",
                                           'spec.contentType: Unsupported value: "'),
    "reject-invalid-content-type.yaml": ("ContentType not one of: kubevirt, archive",
                                         'spec.contentType: Unsupported value: "'),
    "reject-source-and-sourceref.yaml": "Data volume should have either Source or SourceRef",
    "reject-null-source-and-sourceref.yaml": "Data volume should have either Source or SourceRef",
    "reject-no-source.yaml": "Data volume should have either Source or SourceRef",
    "reject-invalid-access-mode.yaml":
        'Unsupported value: "ReadWriteSometimes": supported values: "ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce"',
    "reject-clone-without-name.yaml": "spec.source.pvc.name: Required value",
    "reject-bad-quantity.yaml": "quantities must match the regular expression",
    "reject-invalid-url.yaml": "spec.source Invalid source URL",
    "reject-no-spec.yaml": ('missing required field "spec"', "spec: Required value"),
    "reject-pvc-without-access-modes.yaml": "spec.pvc.accessModes: Required value",
    "reject-null-requests.yaml": "PVC size is missing",
    "reject-null-resources.yaml": "PVC size is missing",
    "reject-no-resources.yaml": "resources.requests.storage is required",
    "reject-no-pvc-or-storage.yaml": "Missing Data volume PVC",
    "reject-null-http.yaml": "Missing Data volume source",
    "reject-two-sources.yaml": "Multiple Data volume sources",
    "reject-two-access-modes.yaml": "PVC multiple accessModes",
    "reject-no-metadata.yaml": "name or generateName is required",
    "reject-no-name.yaml": "name or generateName is required",
    # CDI manifests/example: all DataVolumes are admitted, except that `storage:` left empty is pruned to
    # nothing, so the clone example has no target at all.
    "example-blank-storage.yaml": ACCEPTED,
    "example-clone-without-size.yaml": ACCEPTED,
    "example-clone-null-storage.yaml": "Missing Data volume PVC",
    "example-archive-block.yaml": ACCEPTED,  # refused later, when the PVC is rendered (ErrClaimNotValid)
    "example-archive-filesystem.yaml": ACCEPTED,
    "example-http-block-class.yaml": ACCEPTED,
    "example-gcs.yaml": ACCEPTED,
    "example-http-secret.yaml": ACCEPTED,
    "example-http-insecure.yaml": ACCEPTED,
    "example-registry.yaml": ACCEPTED,
    "example-registry-block.yaml": ACCEPTED,
    "example-upload.yaml": ACCEPTED,
    "example-upload-block.yaml": ACCEPTED,
    "example-vddk-extra-args.yaml": ACCEPTED,
    "example-vm-template-dv.yaml": ACCEPTED,
}


def refused_as_expected(expected: Expected, message: str | None) -> bool:
    """Whether ``message`` (None: admitted) is the outcome CDI gives the case."""
    if expected is ACCEPTED or message is None:
        return expected is ACCEPTED and message is None
    return any(text in message for text in ((expected,) if isinstance(expected, str) else expected))
