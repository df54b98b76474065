"""CDI's upload token (cdi-facts §4.3): PS256, issuer cdi-apiserver, five minutes, PVC upload claims."""

from __future__ import annotations

import datetime

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from uploadproxy import token

def _now() -> datetime.datetime:
    """Read at each use: a token minted at import time would expire before a long suite reaches it."""
    return datetime.datetime.now(datetime.timezone.utc)


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return token.generate_key()


def test_token_carries_cdis_claims(key: rsa.RSAPrivateKey) -> None:
    issued = token.issue(key, namespace="ns", name="disk", now=_now())
    assert jwt.get_unverified_header(issued)["alg"] == "PS256"
    claims = jwt.decode(issued, options={"verify_signature": False})
    assert claims["exp"] - claims["iat"] == 300 and claims["nbf"] == claims["iat"]
    del claims["exp"], claims["iat"], claims["nbf"]
    assert claims == {"iss": "cdi-apiserver", "operation": "Upload", "name": "disk", "namespace": "ns",
                      "resource": {"group": "", "version": "v1", "resource": "persistentvolumeclaims"}}
    assert token.verify(issued, token.public_pem(key)) == token.UploadGrant(namespace="ns", name="disk")


@pytest.mark.parametrize(("age_s", "valid"), [(305, True), (308, True), (312, False), (3600, False)])
def test_expiry_with_cdis_ten_second_leeway(key: rsa.RSAPrivateKey, age_s: int, valid: bool) -> None:
    issued = token.issue(key, namespace="ns", name="disk", now=_now() - datetime.timedelta(seconds=age_s))
    if valid:
        token.verify(issued, token.public_pem(key))
    else:
        with pytest.raises(token.TokenError) as error:
            token.verify(issued, token.public_pem(key))
        assert error.value.status == 401 and "expired" in error.value.message


def test_signature_issuer_and_algorithm_are_checked(key: rsa.RSAPrivateKey) -> None:
    public = token.public_pem(key)
    forged = token.issue(token.generate_key(), namespace="ns", name="disk")
    other_issuer = jwt.encode({"iss": "someone", "exp": _now() + token.LIFETIME, "operation": "Upload", "name": "d",
                               "namespace": "ns", "resource": token.PVC_RESOURCE}, key, algorithm="PS256")
    # The classic confusion: an HMAC token keyed with the (public) verification key.
    hmac = jwt.api_jws.PyJWS().encode(b'{"iss":"cdi-apiserver","exp":9999999999}', b"x" * 32, algorithm="HS256")
    for bad in (forged, other_issuer, hmac, "not-a-token"):
        with pytest.raises(token.TokenError) as error:
            token.verify(bad, public)
        assert error.value.status == 401


@pytest.mark.parametrize("kwargs", [
    {"operation": "Clone"},
    {"name": ""},
    {"resource": {"group": "snapshot.storage.k8s.io", "version": "v1", "resource": "volumesnapshots"}},
])
def test_valid_tokens_that_grant_no_upload_are_bad_requests(key: rsa.RSAPrivateKey, kwargs: dict) -> None:
    args = {"namespace": "ns", "name": "disk", **kwargs}
    with pytest.raises(token.TokenError) as error:
        token.verify(token.issue(key, **args), token.public_pem(key))
    assert error.value.status == 400
