"""Trust settings shared by the HTTP, S3 and registry sources."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def ca_bundle(cert_dir: str | None) -> str | None:
    """One PEM file with every certificate of a CA directory (CDI mounts a ConfigMap there).

    OpenSSL only reads a directory of CAs when it has been prepared with c_rehash, which a ConfigMap
    mount never is, so the certificates are concatenated into a private file instead.
    """
    if not cert_dir:
        return None
    certs = sorted(p for p in Path(cert_dir).iterdir() if p.is_file() and not p.name.startswith("."))
    pem = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in certs if b"BEGIN CERTIFICATE" in p.read_bytes())
    if not pem:
        return None
    fd, path = tempfile.mkstemp(prefix="cdi-ca-", suffix=".pem")
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    return path


def verify_setting(*, cert_dir: str | None, insecure: bool) -> bool | str:
    """What requests/boto3 take as ``verify``: False, a bundle path, or True for the system store."""
    if insecure:
        return False
    return ca_bundle(cert_dir) or True
