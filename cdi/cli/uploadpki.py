"""`cdi upload-pki`: the keys and certificates of the upload path on a real cluster, made once, as CDI's
operator makes them (cdi-facts §4.1, §4.5). Run by the Job in deploy/upload/; safe to run again: what exists
is kept, so tokens and upload pods keep working across runs.

In the namespace (default ``cdi``):
- Secret ``cdi-api-signing-key`` (``id_rsa``, ``id_rsa.pub``): signs upload tokens / verifies them in the proxy;
- Secret ``cdi-uploadserver-signer`` (CA): the controller signs each upload server's certificate with it;
- Secret ``cdi-uploadserver-client-signer`` (CA) and ``cdi-uploadserver-client-cert`` (the proxy's client
  certificate, CN ``client.upload-server.cdi.kubevirt.io``): upload servers accept only that client;
- Secret ``cdi-uploadproxy-server-cert`` (serving the proxy's Service) and ``cdi-apiserver-server-cert``
  (serving the UploadTokenRequest API's Service), each with its CA in ``ca.crt``;
- ConfigMap ``cdi-requestheader-ca``: the API server's front-proxy CA (from kube-system's
  ``extension-apiserver-authentication``), so the token API knows requests come through the aggregator.
And the APIService ``v1beta1.upload.cdi.kubevirt.io`` gets the token API's CA as its caBundle.
"""

from __future__ import annotations

import argparse
import base64
import sys
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import serialization

from cdi.api import names
from cdi.controller import certs
from uploadproxy import contract as uc
from uploadproxy import token

if TYPE_CHECKING:
    from cdi.controller.kube import Kube

PROXY_SERVICE = "cdi-uploadproxy"
API_SERVICE = "cdi-api-upload"
REQUESTHEADER_CA = "cdi-requestheader-ca"


def register(commands: Any, name: str) -> None:
    p = commands.add_parser(name, help="create the upload path's keys and certificates in a cluster (once)",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--namespace", default="cdi", help="kubecdi's namespace (default: cdi)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cdi.controller.kube import Kube  # noqa: PLC0415 - other commands need not load Kubernetes

    ensure(Kube.from_environment(), args.namespace)
    return 0


def _service_hosts(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def ensure(kube: Kube, namespace: str) -> None:
    from cdi.controller.kube import path  # noqa: PLC0415

    secrets = path(plural="secrets", namespace=namespace)

    def secret(name: str, make: Any) -> dict[str, bytes]:
        """The Secret's data, made (and created) only when the Secret is absent."""
        found = kube.get(f"{secrets}/{name}")
        if found is not None:
            return {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}
        data: dict[str, bytes] = make()
        kube.create(secrets, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                              "metadata": {"name": name, "namespace": namespace,
                                           "labels": {names.LABEL_APP: names.APP}},
                              "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
        print(f"created Secret {namespace}/{name}", flush=True)
        return data

    def ca(name: str) -> certs.KeyPair:
        made = secret(name, lambda: _pair_files(certs.new_ca(f"kubecdi {name}")))
        return certs.KeyPair.load(cert_pem=made["tls.crt"], key_pem=made["tls.key"])

    def signing_key() -> dict[str, bytes]:
        key = token.generate_key()
        return {"id_rsa": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()),
                "id_rsa.pub": token.public_pem(key)}

    def serving(name: str, service: str) -> dict[str, bytes]:
        def make() -> dict[str, bytes]:
            authority = certs.new_ca(f"kubecdi {service} CA")
            pair = certs.issue(authority, common_name=service, server=True, hosts=_service_hosts(service, namespace))
            return {**_pair_files(pair), "ca.crt": authority.cert_pem}
        return secret(name, make)

    secret("cdi-api-signing-key", signing_key)
    ca("cdi-uploadserver-signer")
    client_signer = ca("cdi-uploadserver-client-signer")
    secret("cdi-uploadserver-client-cert",
           lambda: _pair_files(certs.issue(client_signer, common_name=uc.UPLOAD_CLIENT_NAME, server=False)))
    serving("cdi-uploadproxy-server-cert", PROXY_SERVICE)
    api = serving("cdi-apiserver-server-cert", API_SERVICE)
    _copy_requestheader_ca(kube, namespace)
    apiservice = path(group="apiregistration.k8s.io", plural="apiservices", name=names.UPLOAD_APISERVICE)
    if kube.patch(apiservice, {"spec": {"caBundle": base64.b64encode(api["ca.crt"]).decode()}}) is None:
        print(f"warning: APIService {names.UPLOAD_APISERVICE} not found: apply deploy/upload first", file=sys.stderr)


def _pair_files(pair: certs.KeyPair) -> dict[str, bytes]:
    return {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem}


def _copy_requestheader_ca(kube: Kube, namespace: str) -> None:
    from cdi.controller.kube import path  # noqa: PLC0415

    source = kube.get(path(plural="configmaps", namespace="kube-system", name="extension-apiserver-authentication"))
    bundle = ((source or {}).get("data") or {}).get("requestheader-client-ca-file", "")
    if not bundle:
        print("warning: kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: "
              "the UploadTokenRequest API cannot tell aggregated requests from others", file=sys.stderr)
    target = path(plural="configmaps", namespace=namespace)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": REQUESTHEADER_CA, "namespace": namespace},
            "data": {"ca.crt": bundle}}
    if kube.create(target, body) is None:
        kube.patch(f"{target}/{REQUESTHEADER_CA}", {"data": body["data"]})
