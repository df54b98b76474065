"""Admission webhooks, aggregated APIs and the pod log hook, each against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.localkube_objects import manifest

Handler = Callable[[str, str, dict | None], tuple[int, dict]]


@contextmanager
def http_server(handle: Handler, *, tls=None) -> Iterator[tuple[str, list]]:
    """A JSON server answering `handle(method, path, body)`; yields its URL and the requests it received."""
    received: list[tuple[str, str, dict | None]] = []

    class Serve(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            received.append((self.command, self.path, body))
            status, answer = handle(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    if tls is not None:
        server.socket = tls.server_context().wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def review(method: str, path: str, body: dict | None) -> tuple[int, dict]:
    """Mutates by adding a label; the validator refuses objects labelled deny=yes."""
    request = body["request"]
    labels = ((request["object"] or request["oldObject"] or {}).get("metadata") or {}).get("labels") or {}
    response: dict = {"uid": request["uid"], "allowed": True}
    if path == "/mutate":
        patch = [{"op": "add", "path": "/metadata/labels/mutated", "value": request["operation"].lower()}]
        response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(patch).encode()).decode())
    elif labels.get("deny") == "yes" or (request["operation"] == "DELETE" and labels.get("keep") == "yes"):
        response.update(allowed=False, status={"code": 403, "message": "no thanks"})
    return 200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def webhook(kind: str, url: str, *, ca: bytes | None = None, policy: str = "Fail") -> dict:
    client_config: dict = {"url": url}
    if ca is not None:
        client_config["caBundle"] = base64.b64encode(ca).decode()
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}WebhookConfiguration",
            "metadata": {"name": f"{kind.lower()}-test"},
            "webhooks": [{"name": f"{kind.lower()}.localkube.test", "clientConfig": client_config,
                          "failurePolicy": policy, "sideEffects": "None", "admissionReviewVersions": ["v1"],
                          "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
                          "rules": [{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
                                     "resources": ["configmaps"]}]}]}


def configmap(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {}}


def test_webhooks_over_https_mutate_and_reject(kubectl, tls_ca):
    with http_server(review, tls=tls_ca) as (url, received):
        ca = tls_ca.ca_cert.read_bytes()
        kubectl("create", "-f", "-", stdin=manifest(webhook("Mutating", f"{url}/mutate", ca=ca),
                                                    webhook("Validating", f"{url}/validate", ca=ca)))
        kubectl("create", "-f", "-", stdin=manifest(configmap("ok")))
        labels = json.loads(kubectl("get", "configmap", "ok", "-o", "json").stdout)["metadata"]["labels"]
        assert labels == {"mutated": "create"}

        refused = kubectl("create", "-f", "-", stdin=manifest(configmap("bad", deny="yes")), check=False)
        assert refused.returncode == 1
        assert 'admission webhook "validating.localkube.test" denied the request: no thanks' in refused.stderr
        assert kubectl("get", "configmap", "bad", check=False).returncode == 1

        kubectl("create", "-f", "-", stdin=manifest(configmap("skipped", skip="1", deny="yes")))  # objectSelector
        kubectl("create", "-f", "-", stdin=manifest(configmap("kept", keep="yes")))
        kept = kubectl("delete", "configmap", "kept", check=False)
        assert 'admission webhook "validating.localkube.test" denied the request: no thanks' in kept.stderr
        assert kubectl("get", "configmap", "kept", "-o", "name").stdout.strip() == "configmap/kept"
        kubectl("create", "-f", "-", stdin=manifest(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}))  # no rule matches secrets

    sent = [body["request"] for _, _, body in received]
    assert [(r["operation"], r["name"]) for r in sent] == [
        ("CREATE", "ok"), ("CREATE", "ok"), ("CREATE", "bad"), ("CREATE", "bad"), ("CREATE", "kept"),
        ("CREATE", "kept"), ("DELETE", "kept")]  # mutating then validating; only validating on DELETE
    assert sent[-1]["oldObject"]["metadata"]["name"] == "kept" and sent[-1]["object"] is None
    assert sent[1]["object"]["metadata"]["labels"] == {"mutated": "create"}  # validators see the mutation


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_unreachable_webhook_honours_failure_policy(kubectl, policy):
    with http_server(review) as (url, _):
        pass  # closed again: nothing listens on the port any more
    kubectl("create", "-f", "-", stdin=manifest(webhook("Validating", f"{url}/validate", policy=policy)))
    done = kubectl("create", "-f", "-", stdin=manifest(configmap("c")), check=False)
    if policy == "Fail":
        assert done.returncode == 1
        assert 'failed calling webhook "validating.localkube.test"' in done.stderr
    else:
        assert done.returncode == 0


def test_https_webhook_with_the_wrong_ca_fails_closed(kubectl, tls_ca, other_ca):
    with http_server(review, tls=tls_ca) as (url, received):
        kubectl("create", "-f", "-", stdin=manifest(
            webhook("Validating", f"{url}/validate", ca=other_ca.ca_cert.read_bytes())))
        done = kubectl("create", "-f", "-", stdin=manifest(configmap("c")), check=False)
    assert done.returncode == 1 and "certificate verify failed" in done.stderr
    assert received == []


TOKENS = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "upload.localkube.test/v1",
          "resources": [{"name": "tokens", "singularName": "token", "namespaced": True, "kind": "Token",
                         "verbs": ["create"]}]}


def aggregated(method: str, path: str, body: dict | None) -> tuple[int, dict]:
    if path.startswith("/apis/upload.localkube.test/v1/namespaces/default/tokens") and method == "POST":
        return 201, {**body, "status": {"token": "t-123"}}
    if path == "/apis/upload.localkube.test/v1":
        return 200, TOKENS
    return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound",
                 "message": f"no {path}"}


def test_apiservice_with_a_url_is_proxied_and_discovered(kubectl):
    with http_server(aggregated) as (url, received):
        kubectl("create", "-f", "-", stdin=manifest({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1.upload.localkube.test", "annotations": {"localkube.dev/url": url}},
            "spec": {"group": "upload.localkube.test", "version": "v1", "groupPriorityMinimum": 1000,
                     "versionPriority": 15}}))
        resources = kubectl("api-resources", "--api-group=upload.localkube.test", "-o", "name").stdout.split()
        assert resources == ["tokens.upload.localkube.test"]
        token = {"apiVersion": "upload.localkube.test/v1", "kind": "Token", "metadata": {"name": "t"}}
        made = kubectl("create", "--validate=false", "-f", "-", "-o", "json", stdin=manifest(token))
        assert json.loads(made.stdout)["status"] == {"token": "t-123"}
        missing = kubectl("get", "--raw", "/apis/upload.localkube.test/v1/namespaces/default/nothing", check=False)
        assert "no /apis/upload.localkube.test/v1/namespaces/default/nothing" in missing.stderr
    posted = [(p.split("?")[0], b["metadata"]["name"]) for m, p, b in received if m == "POST"]
    assert posted == [("/apis/upload.localkube.test/v1/namespaces/default/tokens", "t")]


def test_pod_logs_come_from_the_registered_provider(apiserver, kubectl):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    kubectl("create", "-f", "-", stdin=manifest(pod))
    none = kubectl("logs", "p", check=False)
    assert none.returncode == 1 and "no kubelet serves logs" in none.stderr

    calls = []

    def provider(**query):
        calls.append(query)
        return f"hello from {query['namespace']}/{query['name']}/{query['container']}\n"

    apiserver.server.log_provider = provider
    assert kubectl("logs", "p", "-c", "c", "--tail=5").stdout == "hello from default/p/c\n"
    assert calls == [{"namespace": "default", "name": "p", "container": "c", "follow": False,
                      "previous": False, "tail_lines": 5}]
    raw = urllib.request.urlopen(f"{apiserver.url}/api/v1/namespaces/default/pods/p/log").read()
    assert raw == b"hello from default/p/None\n"


def test_followed_logs_stream_from_an_async_provider(apiserver, kubectl):
    kubectl("run", "p", "--image=busybox", "--", "sleep", "1")

    async def follow(**query):
        for i in range(3):
            yield f"line {i}\n".encode()

    apiserver.server.log_provider = lambda **query: follow(**query)
    assert kubectl("logs", "-f", "p").stdout == "line 0\nline 1\nline 2\n"


def test_binding_assigns_the_pod_to_a_node_once(apiserver, kubectl):
    kubectl("run", "p", "--image=busybox")
    binding = json.dumps({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                          "target": {"kind": "Node", "name": "node-1"}}).encode()
    url = f"{apiserver.url}/api/v1/namespaces/default/pods/p/binding"
    post = urllib.request.Request(url, data=binding, method="POST", headers={"Content-Type": "application/json"})
    assert urllib.request.urlopen(post).status == 201
    assert kubectl("get", "pod", "p", "-o", "jsonpath={.spec.nodeName}").stdout == "node-1"
    with pytest.raises(urllib.error.HTTPError) as again:
        urllib.request.urlopen(post)
    assert again.value.code == 409
