"""The kubelet's spawner, straight: how a container's start is told from a sandbox that never ran it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from localkube.kubelet.spawner import Spawner
from localkube.storage import host_capabilities_missing

pytestmark = pytest.mark.root


@pytest.fixture(autouse=True)
def _sandboxes_can_run() -> None:
    missing = host_capabilities_missing()
    if missing:
        pytest.skip(missing)


def _spec(tmp_path: Path, *argv: str) -> dict[str, object]:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return {"root": str(root), "mounts": [], "workingDir": "", "argv": list(argv), "env": {"PATH": "/usr/bin:/bin"}}


def test_a_container_that_ends_before_its_start_is_read_is_reported_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet's loop is busy while the container runs and ends (as under a burst of pods starting), so the
    sandbox's word is read only after the exit: its start is a start, not 'the sandbox process exited before
    running the container' (an exit seen by then used to be taken for that, when a thread read the word and the
    exit could be known first). The busy loop is a fake: a second's sleep on it right after the spec is handed
    over."""
    handed_over = asyncio.StreamWriter.drain

    async def then_busy(self: asyncio.StreamWriter) -> None:
        await handed_over(self)
        time.sleep(1.0)

    monkeypatch.setattr(asyncio.StreamWriter, "drain", then_busy)

    async def scenario() -> tuple[str, int]:
        spawner = Spawner()
        try:
            process, error = await spawner.spawn(_spec(tmp_path, "true"), log_file=tmp_path / "c.log")
            return error, await process.wait()
        finally:
            await spawner.close()

    assert asyncio.run(scenario()) == ("", 0)


def test_a_missing_command_is_reported_with_its_reason(tmp_path: Path) -> None:
    async def scenario() -> tuple[str, int]:
        spawner = Spawner()
        try:
            process, error = await spawner.spawn(_spec(tmp_path, "no-such-program-here"), log_file=tmp_path / "c.log")
            return error, await process.wait()
        finally:
            await spawner.close()

    assert asyncio.run(scenario()) == ("cannot run 'no-such-program-here': No such file or directory", 128)
