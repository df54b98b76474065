"""Certificates the controller hands out: its webhook's serving cert, and CDI's upload signers (a CA that
signs each upload server's serving cert, another that signs the upload proxy's client cert, cdi-facts §4.5).

EC P-256 keys: small and fast to make, which matters when every upload pod gets a fresh certificate.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = datetime.timedelta(days=365)
LEAF_LIFETIME = datetime.timedelta(days=30)
# A clock a little behind ours must still accept a certificate made just now.
BACKDATE = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def load(cls, *, cert_pem: bytes, key_pem: bytes) -> KeyPair:
        return cls(cert_pem=cert_pem, key_pem=key_pem)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             lifetime: datetime.timedelta) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - BACKDATE)
            .not_valid_after(now + lifetime))


def _pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> KeyPair:
    return KeyPair(cert_pem=cert.public_bytes(serialization.Encoding.PEM),
                   key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))


def new_ca(common_name: str) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (_builder(name, name, key.public_key(), CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return _pem(cert, key)


def issue(ca: KeyPair, *, common_name: str, server: bool, hosts: Sequence[str] = (),
          lifetime: datetime.timedelta = LEAF_LIFETIME) -> KeyPair:
    """A leaf signed by ``ca``; ``hosts`` (DNS names or IP addresses) become its subject alternative names."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (_builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]), ca_cert.subject,
                        key.public_key(), lifetime)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]),
                                        critical=False)
    return _pem(builder.sign(ca_key, hashes.SHA256()), key)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def write_serving_files(folder: Path, *, host: str, ca_name: str) -> tuple[Path, Path, Path]:
    """A fresh CA and a serving certificate for ``host`` in ``folder``: (cert, key, CA cert) paths.

    For a server whose clients are told the CA alongside the address (a webhook configuration's caBundle), so no
    certificate has to be provisioned before the server first starts.
    """
    folder.mkdir(parents=True, exist_ok=True)
    ca = new_ca(ca_name)
    pair = issue(ca, common_name=host, server=True, hosts=[host])
    paths = folder / "tls.crt", folder / "tls.key", folder / "ca.crt"
    for path, pem in zip(paths, (pair.cert_pem, pair.key_pem, ca.cert_pem), strict=True):
        path.write_bytes(pem)
    paths[1].chmod(0o600)
    return paths
