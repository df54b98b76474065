"""The upload path on a real cluster: `cdi upload-pki` against an API server (localkube), and deploy/upload as
kustomize renders it with deploy/ — every Secret the pods mount is one upload-pki makes, the proxy's command
line is one it accepts, and the controller gets the upload signers."""

from __future__ import annotations

import base64

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from cdi.api import names
from cdi.cli import uploadpki
from cdi.controller.kube import Kube, path
from localkube.apiserver import ServerThread
from uploadproxy import contract as uc
from uploadproxy import proxy, token

NAMESPACE = "cdi"


@pytest.fixture
def kube(apiserver: ServerThread) -> Kube:
    api = Kube(client.Configuration(host=apiserver.url))
    api.create(path(plural="namespaces"), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    api.create(path(plural="namespaces"), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})
    return api


def secret_data(kube: Kube, name: str) -> dict[str, bytes]:
    found = kube.get(path(plural="secrets", namespace=NAMESPACE, name=name))
    assert found is not None, f"no Secret {name}"
    return {k: base64.b64decode(v) for k, v in found["data"].items()}


def test_upload_pki_makes_everything_once(kube: Kube) -> None:
    kube.create(path(plural="configmaps", namespace="kube-system"), {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extension-apiserver-authentication"},
        "data": {"requestheader-client-ca-file": "FRONT PROXY CA"}})
    kube.create(path(group="apiregistration.k8s.io", plural="apiservices"), {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": names.UPLOAD_APISERVICE},
        "spec": {"group": names.UPLOAD_GROUP, "version": names.VERSION, "groupPriorityMinimum": 1000,
                 "versionPriority": 15, "service": {"name": "cdi-api-upload", "namespace": NAMESPACE, "port": 443}}})
    uploadpki.ensure(kube, NAMESPACE)
    made = {name: secret_data(kube, name) for name in (
        "cdi-api-signing-key", "cdi-uploadserver-signer", "cdi-uploadserver-client-signer",
        "cdi-uploadserver-client-cert", "cdi-uploadproxy-server-cert", "cdi-apiserver-server-cert")}

    uploadpki.ensure(kube, NAMESPACE)  # again: nothing changes, tokens and pods keep working
    assert {name: secret_data(kube, name) for name in made} == made

    signing = made["cdi-api-signing-key"]
    key = serialization.load_pem_private_key(signing["id_rsa"], password=None)
    issued = token.issue(key, namespace="vms", name="disk")
    assert token.verify(issued, signing["id_rsa.pub"]).name == "disk"
    client_cert = x509.load_pem_x509_certificate(made["cdi-uploadserver-client-cert"]["tls.crt"])
    signer = x509.load_pem_x509_certificate(made["cdi-uploadserver-client-signer"]["tls.crt"])
    assert client_cert.issuer == signer.subject
    assert client_cert.subject.rfc4514_string() == f"CN={uc.UPLOAD_CLIENT_NAME}"
    proxy_cert = x509.load_pem_x509_certificate(made["cdi-uploadproxy-server-cert"]["tls.crt"])
    sans = proxy_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "cdi-uploadproxy.cdi.svc" in sans.get_values_for_type(x509.DNSName)
    apiservice = kube.get(path(group="apiregistration.k8s.io", plural="apiservices", name=names.UPLOAD_APISERVICE))
    assert base64.b64decode(apiservice["spec"]["caBundle"]) == made["cdi-apiserver-server-cert"]["ca.crt"]
    copied = kube.get(path(plural="configmaps", namespace=NAMESPACE, name=uploadpki.REQUESTHEADER_CA))
    assert copied["data"] == {"ca.crt": "FRONT PROXY CA"}


@pytest.fixture
def rendered(deploy_objects: dict[tuple[str, str], dict]) -> dict[tuple[str, str], dict]:
    """deploy/, whose kustomization turns the upload component on."""
    return deploy_objects


def _mounted(pod: dict) -> set[tuple[str, str]]:
    return {("Secret", v["secret"]["secretName"]) if "secret" in v else ("ConfigMap", v["configMap"]["name"])
            for v in pod["volumes"] if "secret" in v or "configMap" in v}


def test_every_secret_mounted_is_one_upload_pki_makes(rendered: dict, kube: Kube) -> None:
    uploadpki.ensure(kube, NAMESPACE)
    proxy = rendered[("Deployment", "cdi-uploadproxy")]["spec"]["template"]["spec"]
    controller = rendered[("Deployment", "cdi-deployment")]["spec"]["template"]["spec"]
    for kind, name in _mounted(proxy) | _mounted(controller):
        plural = "secrets" if kind == "Secret" else "configmaps"
        assert kube.get(path(plural=plural, namespace=NAMESPACE, name=name)) is not None, f"{kind} {name}"
    env = {e["name"]: e.get("value") for e in controller["containers"][0]["env"]}
    for variable in (names.ENV_UPLOAD_SERVER_CA_CERT, names.ENV_UPLOAD_SERVER_CA_KEY, names.ENV_UPLOAD_CLIENT_CA):
        mounts = [m["mountPath"] for m in controller["containers"][0]["volumeMounts"]]
        assert any(env[variable].startswith(m + "/") for m in mounts), variable
    signer_for_proxy = next(v for v in proxy["volumes"] if v.get("secret", {}).get("secretName") ==
                            "cdi-uploadserver-signer")
    assert signer_for_proxy["secret"]["items"] == [{"key": "tls.crt", "path": "tls.crt"}], "never the signer's key"


def test_the_proxy_command_line_is_one_it_accepts(rendered: dict) -> None:
    container = rendered[("Deployment", "cdi-uploadproxy")]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][0] == "cdi-uploadproxy"
    args = proxy.build_parser().parse_args(container["command"][1:])
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    for given in (args.server_cert_dir, args.client_cert_dir, args.upload_server_ca, args.token_signing_key,
                  args.token_api_cert_dir, args.requestheader_client_ca):
        assert any(given == m or given.startswith(m + "/") for m in mounts), given
    assert [e["name"] for e in container["env"]] == [uc.APISERVER_PUBLIC_KEY]
    api = rendered[("APIService", names.UPLOAD_APISERVICE)]
    service = rendered[("Service", api["spec"]["service"]["name"])]
    assert service["metadata"]["namespace"] == api["spec"]["service"]["namespace"] == NAMESPACE
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert service["spec"]["ports"][0]["port"] == api["spec"]["service"]["port"]
    assert ports[service["spec"]["ports"][0]["targetPort"]] == args.token_api_port
