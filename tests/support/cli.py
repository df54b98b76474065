"""Running ``cdi import`` and ``cdi-importer`` as a user would (a subprocess), and reading their verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from importer import contract


def cdi_import(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``cdi import --no-progress --json ARGS``; ``env`` is added to this process's environment."""
    return subprocess.run([sys.executable, "-m", "cdi.cli.main", "import", "--no-progress", "--json", *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def succeeded(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The ``--json`` object of a run that must have succeeded."""
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr.strip()[-2000:]}"
    return json.loads(result.stdout)


def failed(result: subprocess.CompletedProcess[str], reason: str) -> str:
    """Assert the run failed with ``reason`` on a one-line last stderr line; returns that line."""
    assert result.returncode != 0, f"expected {reason}, but it succeeded: {result.stdout}"
    lines = result.stderr.strip().splitlines()
    assert lines, "failed without a word on stderr"
    assert lines[-1].startswith(f"error: {reason}: "), result.stderr.strip()[-2000:]
    return lines[-1]


def pod_env(workdir: Path, **env: str) -> dict[str, str]:
    """CDI's importer env contract with this machine's paths: /data, the block device and the termination log
    under ``workdir``, no metrics server. ``env`` (e.g. IMPORTER_ENDPOINT=...) adds to or overrides the defaults."""
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    return {contract.DATA_DIR: str(data), contract.BLOCK_PATH: str(workdir / "no-block-device"),
            contract.TERMINATION_LOG: str(workdir / "termination-log"), contract.METRICS_PORT: "0",
            contract.SOURCE: contract.SOURCE_HTTP, contract.CONTENT_TYPE: contract.CONTENT_KUBEVIRT,
            contract.FILESYSTEM_OVERHEAD: "0.055", contract.INSECURE_TLS: "false",
            contract.PREALLOCATION: "false", **env}


def run_importer_pod(env: dict[str, str], *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``cdi-importer`` with exactly ``env`` for the contract (none of this process's IMPORTER_* leaks in)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IMPORTER_")}
    return subprocess.run([sys.executable, "-m", "importer.pod"], capture_output=True, text=True, timeout=timeout,
                          env={**clean, **env})
