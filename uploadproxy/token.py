"""CDI's upload token (cdi-facts §4.3): a PS256 JWT from the token issuer, checked by the upload proxy.

The issuer (our UploadTokenRequest API) signs with its RSA private key; the proxy verifies with the
public key and answers 401 for a bad signature, expiry or issuer, and 400 for a valid token that does not
grant an upload of a PVC.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "cdi-apiserver"
ALGORITHM = "PS256"
LIFETIME = datetime.timedelta(minutes=5)
LEEWAY = datetime.timedelta(seconds=10)
OPERATION_UPLOAD = "Upload"
PVC_RESOURCE = {"group": "", "version": "v1", "resource": "persistentvolumeclaims"}


class TokenError(Exception):
    """A token the proxy refuses; ``status`` is the HTTP status CDI answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class UploadGrant:
    namespace: str
    name: str


def generate_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_pem(key: rsa.RSAPrivateKey) -> bytes:
    """The public half as PEM: what the proxy gets in APISERVER_PUBLIC_KEY."""
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def issue(key: rsa.RSAPrivateKey, *, namespace: str, name: str, operation: str = OPERATION_UPLOAD,
          now: datetime.datetime | None = None, resource: dict[str, str] | None = None) -> str:
    """A signed token allowing ``operation`` on PVC ``namespace/name`` for five minutes from ``now``."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    claims = {
        "iss": ISSUER, "iat": now, "nbf": now, "exp": now + LIFETIME,
        "operation": operation, "name": name, "namespace": namespace,
        "resource": resource if resource is not None else PVC_RESOURCE,
    }
    return jwt.encode(claims, key, algorithm=ALGORITHM)


def verify(token: str, public_key: bytes | rsa.RSAPublicKey) -> UploadGrant:
    """The PVC an upload token grants, or TokenError with CDI's status (401 invalid, 400 not an upload)."""
    try:
        claims = jwt.decode(token, public_key, algorithms=[ALGORITHM], issuer=ISSUER, leeway=LEEWAY,
                            options={"require": ["exp", "iss"]})
    except jwt.PyJWTError as error:
        raise TokenError(401, f"invalid token: {error}") from error
    resource = claims.get("resource")
    if claims.get("operation") != OPERATION_UPLOAD:
        raise TokenError(400, f"token is not for an upload (operation {claims.get('operation')!r})")
    if not claims.get("name") or not claims.get("namespace"):
        raise TokenError(400, "token names no PVC")
    if not isinstance(resource, dict) or resource.get("resource") != PVC_RESOURCE["resource"]:
        raise TokenError(400, f"token is not for a persistentvolumeclaim (resource {resource!r})")
    return UploadGrant(namespace=str(claims["namespace"]), name=str(claims["name"]))
