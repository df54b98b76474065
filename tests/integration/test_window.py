"""The Block-target export: qemu-img reads a qcow2 through a small memory window over a sequential stream."""

import os
import subprocess
import threading

import pytest

from importer.nbd import NbdServer
from importer.window import Window


def qcow2_with_tail(tmp_path, *, tail: int):
    raw = tmp_path / "src.raw"
    with raw.open("wb") as f:
        for i in range(64):
            f.write(os.urandom(256 << 10) if i % 3 else bytes(256 << 10))
    qcow2 = tmp_path / "src.qcow2"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    # Bytes qemu-img never reads: the download must still reach the end (for the checksum) without waiting
    # for reads that will never come.
    return raw, qcow2.read_bytes() + os.urandom(tail)


@pytest.mark.parametrize("span", [4 << 20, 8 << 20])
def test_conversion_through_a_small_window_reads_the_image_about_once(tmp_path, span):
    raw, data = qcow2_with_tail(tmp_path, tail=3 << 20)
    ranged = []

    def read_range(offset: int, length: int) -> bytes:
        ranged.append(length)
        return data[offset : offset + length]

    window = Window(size=len(data), read_range=read_range, span=span, behind=span, lookahead=span)

    def arrive() -> None:
        for at in range(0, len(data), 64 << 10):
            window.append(data[at : at + (64 << 10)])
        window.finish()

    downloader = threading.Thread(target=arrive)
    downloader.start()
    server = NbdServer(window, size=len(data), socket_path=tmp_path / "nbd.sock")
    out = tmp_path / "out.raw"
    try:
        subprocess.run(["qemu-img", "convert", "-W", "-f", "qcow2", "-O", "raw", server.url, str(out)],
                       check=True, timeout=60)
        window.drain()
        assert window.wait_done() == len(data)
    finally:
        window.finish(window.error)
        downloader.join(timeout=30)
        server.close()
    assert out.read_bytes() == raw.read_bytes()
    assert sum(ranged) <= len(data) // 2, "most reads must come from the window, not from ranged re-reads"
    assert not downloader.is_alive()
