"""CDI's progress metric, served over HTTPS with a throwaway self-signed certificate (cdi-facts §3.9)."""

from __future__ import annotations

import datetime
import logging
import tempfile
from pathlib import Path

import prometheus_client
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from importer.contract import PROGRESS_METRIC
from importer.progress import Snapshot

log = logging.getLogger(__name__)


class ProgressMetric:
    def __init__(self, owner_uid: str) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        # prometheus_client appends "_total" to counters itself.
        self._counter = prometheus_client.Counter(PROGRESS_METRIC.removesuffix("_total"),
                                                  "The import progress in percentage", ["ownerUID"],
                                                  registry=self.registry).labels(ownerUID=owner_uid)
        self._value = 0.0

    def __call__(self, snapshot: Snapshot) -> None:
        if snapshot.percent > self._value:
            self._counter.inc(snapshot.percent - self._value)
            self._value = snapshot.percent

    def serve(self, port: int, *, addr: str = "0.0.0.0") -> None:  # noqa: S104 - the controller scrapes the pod IP
        certfile, keyfile = _self_signed()
        prometheus_client.start_http_server(port, addr=addr, registry=self.registry, certfile=str(certfile),
                                            keyfile=str(keyfile))


def serve_progress(owner_uid: str, *, port: int, addr: str) -> ProgressMetric | None:
    """The metric, served on ``port`` for the controller to scrape; None when it cannot be (logged): the import or
    upload still runs, unobserved."""
    try:
        metric = ProgressMetric(owner_uid)
        metric.serve(port, addr=addr)
    except Exception:
        log.exception("cannot serve the progress metric on port %d", port)
        return None
    return metric


def _self_signed() -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cdi-importer")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=7)).sign(key, hashes.SHA256()))
    folder = Path(tempfile.mkdtemp(prefix="cdi-metrics-"))
    (folder / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "tls.crt", folder / "tls.key"
