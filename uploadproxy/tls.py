"""TLS contexts for the upload path: proxy → upload server is mutual TLS with certificates from CDI's signers."""

from __future__ import annotations

import ssl

from importer.errors import ImportFailed, Reason

_VERSIONS = {"VersionTLS12": ssl.TLSVersion.TLSv1_2, "VersionTLS13": ssl.TLSVersion.TLSv1_3,
             "1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def server_context(*, cert: str, key: str, client_ca: str | None = None, min_version: str = "",
                   ciphers: str = "") -> ssl.SSLContext:
    """Serving context. With ``client_ca``, client certificates are checked against it when given: the handler
    answers 401 without one, as CDI does, so the kubelet's readiness probe (no certificate) still reaches /healthz."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _version(min_version)
    if ciphers:
        context.set_ciphers(ciphers.replace(",", ":"))
    context.load_cert_chain(cert, key)
    if client_ca:
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cafile=client_ca)
    return context


def client_context(*, ca: str | None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """Client context trusting ``ca`` (the system store when None) and presenting ``cert`` if given."""
    context = ssl.create_default_context(cafile=ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert:
        context.load_cert_chain(cert, key)
    return context


def peer_common_name(peercert: dict | None) -> str | None:
    """The CN of a verified peer certificate as :meth:`ssl.SSLSocket.getpeercert` returns it."""
    for rdn in (peercert or {}).get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return None


def _version(name: str) -> ssl.TLSVersion:
    if not name:
        return ssl.TLSVersion.TLSv1_2
    try:
        return _VERSIONS[name]
    except KeyError:
        raise ImportFailed(Reason.InvalidArgument, f"TLS_MIN_VERSION {name!r} is not one of "
                           f"{', '.join(_VERSIONS)}") from None
