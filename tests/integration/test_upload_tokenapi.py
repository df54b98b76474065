"""The UploadTokenRequest API (cdi-facts §4.4) served over HTTPS: discovery, tokens the proxy's check accepts,
CDI-style refusals, and the aggregator identity checked when a real API server is in front."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator

import jwt
import pytest
import requests
from cryptography.hazmat.primitives.asymmetric import rsa

from cdi.api import names
from tests.fixtures.upload import AppThread, UploadPKI
from uploadproxy import tls, token
from uploadproxy.tokenapi import BASE, Caller, TokenAPI

Serve = Callable[..., str]


@pytest.fixture
def serve(upload_pki: UploadPKI) -> Iterator[Serve]:
    threads: list[AppThread] = []

    def start(api: TokenAPI) -> str:
        threads.append(AppThread(api.app(), context=tls.server_context(cert=str(upload_pki.server_cert),
                                                                         key=str(upload_pki.server_key))))
        return threads[-1].url

    yield start
    for thread in threads:
        thread.close()


def request(pvc: str | None = "disk", **metadata: str) -> dict:
    return {"apiVersion": names.UPLOAD_API_VERSION, "kind": names.UPLOAD_TOKEN_REQUEST,
            "metadata": metadata or {"generateName": "token-for-virtctl-"},
            "spec": {"pvcName": pvc} if pvc else {}}


def post(url: str, body: dict, upload_pki: UploadPKI, namespace: str = "vms", **headers: str) -> requests.Response:
    return requests.post(f"{url}{BASE}/namespaces/{namespace}/uploadtokenrequests", json=body, headers=headers,
                         verify=str(upload_pki.ca), timeout=10)


def test_discovery(serve: Serve, signing_key: rsa.RSAPrivateKey, upload_pki: UploadPKI) -> None:
    url = serve(TokenAPI(signing_key))
    listing = requests.get(url + BASE, verify=str(upload_pki.ca), timeout=10).json()
    assert listing["groupVersion"] == "upload.cdi.kubevirt.io/v1beta1"
    assert listing["resources"] == [{"name": "uploadtokenrequests", "singularName": "uploadtokenrequest",
                                     "namespaced": True, "kind": "UploadTokenRequest", "verbs": ["create"],
                                     "shortNames": ["utr", "utrs"]}]
    group = requests.get(f"{url}/apis/upload.cdi.kubevirt.io", verify=str(upload_pki.ca), timeout=10).json()
    assert group["preferredVersion"]["groupVersion"] == "upload.cdi.kubevirt.io/v1beta1"


def test_create_answers_with_a_token_the_proxy_accepts(serve: Serve, signing_key: rsa.RSAPrivateKey,
                                                       upload_pki: UploadPKI) -> None:
    url = serve(TokenAPI(signing_key))
    answer = post(url, request(), upload_pki)
    assert answer.status_code == 201
    body = answer.json()
    assert body["metadata"]["name"].startswith("token-for-virtctl-") and body["metadata"]["namespace"] == "vms"
    assert body["spec"] == {"pvcName": "disk"}
    issued = body["status"]["token"]
    assert token.verify(issued, token.public_pem(signing_key)) == token.UploadGrant(namespace="vms", name="disk")
    claims = jwt.decode(issued, options={"verify_signature": False})
    assert jwt.get_unverified_header(issued)["alg"] == "PS256"
    assert datetime.timedelta(seconds=claims["exp"] - claims["iat"]) == token.LIFETIME
    assert post(url, request(name="mine"), upload_pki).json()["metadata"]["name"] == "mine"


@pytest.mark.parametrize(("body", "namespace", "status"), [
    (request(pvc=None), "vms", 422),
    ({"kind": "Pod"}, "vms", 400),
    (request(name="x", namespace="other"), "vms", 400),
])
def test_refusals(serve: Serve, signing_key: rsa.RSAPrivateKey, upload_pki: UploadPKI, body: dict, namespace: str,
                  status: int) -> None:
    answer = post(serve(TokenAPI(signing_key)), body, upload_pki, namespace=namespace)
    assert answer.status_code == status
    assert answer.json()["kind"] == "Status" and answer.json()["code"] == status


def test_behind_an_aggregator_the_caller_is_authorized(serve: Serve, signing_key: rsa.RSAPrivateKey,
                                                       upload_pki: UploadPKI) -> None:
    asked: list[tuple[Caller, str]] = []

    def authorize(caller: Caller, namespace: str) -> bool:
        asked.append((caller, namespace))
        return caller.user == "alice"

    trusted = serve(TokenAPI(signing_key, authorize=authorize, trusted_proxy=lambda _request: True))
    assert post(trusted, request(), upload_pki, **{"X-Remote-User": "alice", "X-Remote-Group": "devs"}).status_code == 201
    assert asked == [(Caller(user="alice", groups=("devs",), extra={}), "vms")]
    denied = post(trusted, request(), upload_pki, **{"X-Remote-User": "bob"})
    assert denied.status_code == 403
    assert 'User "bob" cannot create resource "uploadtokenrequests"' in denied.json()["message"]
    untrusted = serve(TokenAPI(signing_key, authorize=authorize))  # no front-proxy client certificate
    assert post(untrusted, request(), upload_pki, **{"X-Remote-User": "alice"}).status_code == 401
