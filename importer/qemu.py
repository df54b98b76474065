"""qemu-img, run the way CDI runs it (cdi-facts §3.5) but fenced in: explicit input format, resource limits."""

from __future__ import annotations

import re
import resource
import subprocess
from collections.abc import Callable
from pathlib import Path

from importer.errors import ImportFailed, Reason

QEMU_IMG = "qemu-img"
# A hostile image must not be able to make qemu-img eat the node: cap its address space and CPU time.
MEMORY_LIMIT = 2 << 30
CPU_SECONDS = 6 * 3600
_PROGRESS = re.compile(rb"\((\d+(?:\.\d+)?)/100%\)")


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def convert(*, source: str, source_format: str, dest: Path, block: bool, direct: bool, preallocate: bool,
            on_progress: Callable[[float], None]) -> subprocess.Popen[bytes]:
    """Start ``qemu-img convert`` to raw; returns the running process (see :func:`wait`).

    Written with O_DIRECT (``-t none``, what CDI falls back to after an OOM kill) wherever the target takes it
    (``direct``): through the page cache every byte is copied once more, and the kernel's writeback of it
    competes with the download for the CPUs. A 1 GiB qcow2 (512 MiB of data) from nginx into a directory on
    this machine's ext4 took 0.51-0.55 s that way against 0.58-0.89 s through the page cache, early writeback
    (``importer.writeback``) included; 512 MiB into a loop device over a file, 0.42 s against 0.6-2.1 s. A
    target without O_DIRECT is written through the page cache and written back as it goes (the caller's part).
    """
    cache = "none" if direct else "writeback"
    args = [QEMU_IMG, "convert", "-p", "-t", cache, "-W", "-f", source_format, "-O", "raw"]
    if preallocate:
        args += ["-S", "0"] if block else ["-o", "preallocation=falloc"]
    args += [source, str(dest)]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_limits)
    process.on_progress = on_progress  # type: ignore[attr-defined]
    return process


def wait(process: subprocess.Popen[bytes]) -> None:
    """Follow qemu-img's progress output until it exits; raise ConversionFailed with its own words."""
    assert process.stdout is not None and process.stderr is not None
    buffer = b""
    while block := process.stdout.read1(4096):  # type: ignore[attr-defined]
        buffer += block
        *records, buffer = re.split(rb"[\r\n]", buffer)
        for record in records:
            match = _PROGRESS.search(record)
            if match:
                process.on_progress(float(match[1]))  # type: ignore[attr-defined]
    err = process.stderr.read().decode(errors="replace")
    if process.wait() != 0:
        line = " ".join(err.split()) or f"exit status {process.returncode}"
        raise ImportFailed(Reason.ConversionFailed, f"qemu-img convert: {line}"[:1000])

