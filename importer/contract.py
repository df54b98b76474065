"""CDI's importer pod contract: environment variable names, paths and the termination message.

The controller renders importer pods from these names and parses termination messages with
:func:`parse_termination`; the pod entry point reads the same names. One module owns them.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from dataclasses import dataclass, field

from importer.errors import ImportFailed, Reason

# Environment variables (cdi-facts §3.2).
SOURCE = "IMPORTER_SOURCE"
ENDPOINT = "IMPORTER_ENDPOINT"
CONTENT_TYPE = "IMPORTER_CONTENTTYPE"
IMAGE_SIZE = "IMPORTER_IMAGE_SIZE"
OWNER_UID = "OWNER_UID"
FILESYSTEM_OVERHEAD = "FILESYSTEM_OVERHEAD"
INSECURE_TLS = "INSECURE_TLS"
CHECKSUM = "IMPORTER_CHECKSUM"
ACCESS_KEY_ID = "IMPORTER_ACCESS_KEY_ID"
SECRET_KEY = "IMPORTER_SECRET_KEY"
CERT_DIR = "IMPORTER_CERT_DIR"
PROXY_CERT_DIR = "IMPORTER_PROXY_CERT_DIR"
EXTRA_HEADER_PREFIX = "IMPORTER_EXTRA_HEADER_"
PREALLOCATION = "PREALLOCATION"
CACHE_MODE = "CACHE_MODE"
REGISTRY_IMAGE_ARCHITECTURE = "IMPORTER_REGISTRY_IMAGE_ARCHITECTURE"
PULL_METHOD = "IMPORTER_PULL_METHOD"
HTTP_PROXY = "http_proxy"
HTTPS_PROXY = "https_proxy"
NO_PROXY = "no_proxy"
# Ours, beyond CDI: overridable paths (tests), the stall timeout and the URL policy.
DATA_DIR = "IMPORTER_DATA_DIR"
BLOCK_PATH = "IMPORTER_BLOCK_PATH"
TERMINATION_LOG = "IMPORTER_TERMINATION_LOG"
METRICS_PORT = "IMPORTER_METRICS_PORT"
METRICS_ADDRESS = "IMPORTER_METRICS_ADDRESS"  # the pod IP: in cdi local pods share one network
STALL_TIMEOUT = "IMPORTER_STALL_TIMEOUT"
URL_ALLOW = "IMPORTER_URL_ALLOW"
URL_DENY = "IMPORTER_URL_DENY"

# Values of IMPORTER_SOURCE.
SOURCE_HTTP = "http"
SOURCE_S3 = "s3"
SOURCE_REGISTRY = "registry"
SOURCE_NONE = "none"
SOURCE_UPLOAD = "upload"
CONTENT_KUBEVIRT = "kubevirt"
CONTENT_ARCHIVE = "archive"

# Pod paths (cdi-facts §3.1, §3.3).
DEFAULT_DATA_DIR = "/data"
DISK_IMAGE_NAME = "disk.img"
DEFAULT_BLOCK_PATH = "/dev/cdi-block-volume"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
DEFAULT_METRICS_PORT = 8443
CERT_MOUNT = "/certs"
PROXY_CERT_MOUNT = "/proxycerts/"
TERMINATION_MESSAGE_MAX = 4096

IMPORT_COMPLETE = "Import Complete"
UPLOAD_COMPLETE = "Upload Complete"
DEADLINE_PASSED = "Deadline Passed"
PROGRESS_METRIC = "kubevirt_cdi_import_progress_total"

_FAILURE = re.compile(r"^(?:Unable to [^:]*: )?(?P<reason>[A-Za-z]+): (?P<message>.*)$")


@dataclass
class Termination:
    """What the importer tells the controller when it stops (cdi-facts §3.10)."""

    exit_code: int
    message: str
    preallocation_applied: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    reason: Reason | None = None
    deadline_passed: bool = False  # an upload server gave up waiting: the controller starts a fresh one

    @property
    def permanent(self) -> bool:
        return self.reason is not None and self.reason.permanent

    @property
    def failed(self) -> bool:
        """A non-zero exit, or an exit-0 message naming a failure (CDI's checksum form, our permanent reasons)."""
        return self.exit_code != 0 or self.reason is not None


def success_message(
    *, preallocation_applied: bool, labels: dict[str, str] | None = None, message: str = IMPORT_COMPLETE,
    scratch_key: bool = True,
) -> str:
    """CDI's JSON termination message for success, key order as CDI writes it (blank and upload: no scratch key)."""
    body: dict[str, object] = {"scratchSpaceRequired": False} if scratch_key else {}
    body["preallocationApplied"] = preallocation_applied
    if labels:
        body["labels"] = labels
    body["message"] = message
    return json.dumps(body, separators=(",", ":"))[:TERMINATION_MESSAGE_MAX]


def deadline_message() -> str:
    """What an upload server writes when its DEADLINE passed without a finished upload (cdi-facts §3.10)."""
    return json.dumps({"deadlinePassed": True, "message": DEADLINE_PASSED}, separators=(",", ":"))


_CONNECT_REASONS = {Reason.NotFound, Reason.Unauthorized, Reason.URLDenied, Reason.TLSError, Reason.SourceUnreachable}


def failure_message(failure: ImportFailed, *, source: str) -> str:
    """CDI's plain-text failure line, with our Reason right after CDI's prefix so it can be parsed back."""
    if failure.reason in _CONNECT_REASONS and source:
        prefix = f"Unable to connect to {source} data source"
    else:
        prefix = "Unable to process data"
    return f"{prefix}: {failure.reason.name}: {failure.message}"[:TERMINATION_MESSAGE_MAX]


def failure_exit(failure: ImportFailed, *, source: str) -> tuple[int, str]:
    """The exit code and termination message of a failed import.

    A permanent failure exits 0 with the line in CDI's JSON form, as CDI's importer does for a checksum mismatch:
    under ``restartPolicy: OnFailure`` the kubelet then never runs it again, so it fails on the first attempt
    however quickly the kubelet would restart it. A transient failure exits 1: the kubelet's restart is the retry.
    """
    text = failure_message(failure, source=source)
    if failure.reason.permanent:
        return 0, json.dumps({"message": text[:TERMINATION_MESSAGE_MAX - 64]}, separators=(",", ":"))
    return 1, text


def parse_termination(exit_code: int, message: str) -> Termination:
    """Read back what :func:`success_message` or :func:`failure_message` wrote (or CDI's own texts)."""
    text = (message or "").strip()
    if exit_code == 0 and text.startswith("{"):
        try:
            body = json.loads(text)
        except ValueError:
            body = {"message": text}
        said = str(body.get("message", ""))
        return Termination(
            exit_code=0,
            message=said,
            reason=_reason(said) or (Reason.ChecksumMismatch if "checksum mismatch" in said.lower() else None),
            preallocation_applied=bool(body.get("preallocationApplied", False)),
            labels={str(k): str(v) for k, v in (body.get("labels") or {}).items()},
            deadline_passed=bool(body.get("deadlinePassed", False)),
        )
    first = text.splitlines()[0] if text else ""
    return Termination(exit_code=exit_code, message=first, reason=_reason(first))


def _reason(line: str) -> Reason | None:
    match = _FAILURE.match(line)
    return Reason[match["reason"]] if match and match["reason"] in Reason.__members__ else None


def write_termination(path: Path, text: str) -> None:
    """Write the termination message; a pod without the file (a local run) only loses the message, not the work."""
    try:
        path.write_text(text[:TERMINATION_MESSAGE_MAX])
    except OSError as error:
        logging.getLogger(__name__).warning("cannot write termination message to %s: %s", path, error)
