"""The one documented set of failure reasons.

Every failure of the data plane is an :class:`ImportError_` carrying one :class:`Reason`. The CLI prints
``error: <Reason>: <message>``; the pod writes the same text into its termination message; the controller
parses it back with :func:`importer.contract.parse_failure`.
"""

from __future__ import annotations

import enum


class Reason(enum.Enum):
    """Why an import failed. ``permanent`` reasons are never retried: trying again cannot help."""

    InvalidArgument = ("bad configuration or arguments", True)
    NotFound = ("the source does not exist (HTTP 404, missing object, unknown tag)", True)
    Unauthorized = ("the source refused our credentials (HTTP 401/403, bad keys)", True)
    URLDenied = ("the URL or a redirect target is denied by the allow/deny list", True)
    RedirectLoop = ("the server redirected too many times", True)
    HTTPError = ("the server refused the request with another 4xx status", True)
    TLSError = ("the server's certificate could not be verified", True)
    SourceUnreachable = ("the source could not be reached, even after retries", False)
    TransferFailed = ("the transfer broke and could not be resumed, even after retries", False)
    Timeout = ("no progress for longer than the stall timeout", False)
    ChecksumMismatch = ("the received bytes do not match the expected checksum or digest", True)
    TargetTooSmall = ("the image does not fit in the target", True)
    UnsupportedFormat = ("the image format or compression is not supported", True)
    UnsafeImage = ("the image references host files or has features we refuse", True)
    UnsafeArchive = ("the archive has members that escape the target or are not regular files", True)
    ConversionFailed = ("qemu-img could not convert the image", True)
    TargetError = ("the target could not be written", False)
    InternalError = ("a bug in the importer; its log has the details", False)

    def __init__(self, description: str, permanent: bool) -> None:
        self.description = description
        self.permanent = permanent


class ImportFailed(Exception):
    """A failure with a documented reason and a one-line message."""

    def __init__(self, reason: Reason, message: str) -> None:
        # One line, always: it ends up in a termination message and a status condition.
        self.reason = reason
        self.message = " ".join(str(message).split())
        super().__init__(f"{reason.name}: {self.message}")

    @property
    def permanent(self) -> bool:
        return self.reason.permanent
