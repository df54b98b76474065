"""What every source gives the pipeline: the image's bytes as the server holds them, resumable.

A source knows how to open its stream at an offset and how big it is. The pipeline owns retries,
back-off, stall detection and resume (:mod:`importer.transfer`); a source only classifies what went
wrong: :class:`importer.errors.ImportFailed` for permanent failures, :class:`Transient` for the rest.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass, field


class Transient(Exception):
    """A failure worth retrying (connection reset, 5xx, timeout). Carries the Reason to report if retries run out."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(" ".join(message.split()))
        # True when we never got a byte from the server (connection refused, DNS): reported as
        # SourceUnreachable rather than TransferFailed once retries are exhausted.
        self.unreachable = unreachable


@dataclass(frozen=True)
class Probe:
    """What a source learnt when it was first opened."""

    size: int | None  # bytes the stream will deliver, if the server said
    resumable: bool  # the stream can be reopened at an offset (HTTP Range, S3 ranged GET)
    labels: dict[str, str] = field(default_factory=dict)  # registry image ENV labels (cdi-facts §2.3)


@dataclass(frozen=True)
class SourceOptions:
    """Everything a source needs to reach its data; filled from the CLI flags or CDI's env contract."""

    url: str
    access_key: str = ""  # HTTP basic user, S3 access key id, registry user
    secret_key: str = ""
    cert_dir: str | None = None  # directory of CA certificates (*.crt, *.pem) to trust
    insecure: bool = False  # skip TLS verification (CDI's insecureSkipVerify / insecureRegistries)
    headers: tuple[tuple[str, str], ...] = ()  # extra request headers (IMPORTER_EXTRA_HEADER_<i>)
    architecture: str | None = None  # registry platform; None means this machine's
    stall_timeout: float = 600.0  # seconds without a byte before a transfer counts as stalled
    url_allow: tuple[str, ...] = ()  # CIDRs / host names always allowed (see importer.urlpolicy)
    url_deny: tuple[str, ...] = ()  # denied in addition to the link-local/metadata defaults


class Source(abc.ABC):
    """A stream of bytes, reopenable at an offset when :attr:`Probe.resumable`."""

    #: CDI's name of the source kind, used in messages ("Unable to connect to http data source").
    kind: str = ""
    #: Bytes read off the wire so far, over all attempts, including any a source had to skip to reach an offset.
    received: int = 0

    @abc.abstractmethod
    def probe(self) -> Probe:
        """Contact the source; raise ImportFailed for permanent problems (404, 401, denied URL)."""

    @abc.abstractmethod
    def stream(self, offset: int) -> Iterator[bytes]:
        """Yield the bytes from ``offset`` to the end. Only offset 0 unless the probe said resumable."""

    def close(self) -> None:
        """Release connections; the default holds none."""
