"""The container image's install steps, run for real on this Debian machine (no container engine here)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_dockerfile_runs_the_install_script_as_a_non_root_user():
    lines = (REPO / "Dockerfile").read_text().splitlines()
    assert any(line.startswith("FROM debian:") for line in lines)
    assert "RUN /src/deploy/image/install.sh /src /opt/kubecdi && rm -rf /src" in lines
    assert "USER 1001" in lines


@pytest.mark.skipif(os.geteuid() != 0, reason="installs Debian packages: needs root")
def test_install_script_produces_working_programs(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "*.egg-info", "__pycache__", "build"))
    prefix = tmp_path / "opt"
    subprocess.run([str(src / "deploy/image/install.sh"), str(src), str(prefix)], check=True, timeout=900)
    out = subprocess.run([str(prefix / "bin/cdi"), "import", "--help"], capture_output=True, text=True, check=True)
    assert "--dest" in out.stdout
    failed = subprocess.run([str(prefix / "bin/cdi-importer")], capture_output=True, text=True,
                            env={"IMPORTER_SOURCE": "bogus", "IMPORTER_TERMINATION_LOG": str(tmp_path / "term"),
                                 "IMPORTER_METRICS_PORT": "0", "IMPORTER_DATA_DIR": str(tmp_path)})
    assert failed.returncode == 0, "a permanent failure: CDI's exit-0 JSON form, never restarted"
    assert json.loads((tmp_path / "term").read_text()) == {
        "message": "Unable to process data: InvalidArgument: Unknown data source: bogus"}
    for program in ("cdi-controller", "cdi-uploadserver", "cdi-uploadproxy"):  # the Dockerfile's entry points
        assert (prefix / "bin" / program).exists(), program
