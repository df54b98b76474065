"""qemu-img reads an image over our NBD export while the image is still arriving."""

import subprocess
import threading
import time

from importer.nbd import NbdServer, Staging


def test_qemu_img_converts_an_image_that_arrives_slowly(tmp_path):
    raw = tmp_path / "src.raw"
    with raw.open("wb") as f:
        for i in range(16):
            f.write(bytes([i + 1]) * (256 << 10) if i % 2 else bytes(256 << 10))
    qcow2 = tmp_path / "src.qcow2"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    data = qcow2.read_bytes()

    staging = Staging(tmp_path / "staged")
    server = NbdServer(staging, size=len(data), socket_path=tmp_path / "nbd.sock")

    def arrive() -> None:
        for at in range(0, len(data), 64 << 10):
            staging.append(data[at : at + (64 << 10)])
            time.sleep(0.002)
        staging.finish()

    writer = threading.Thread(target=arrive)
    writer.start()
    out = tmp_path / "out.raw"
    try:
        subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", server.url, str(out)], check=True, timeout=60)
    finally:
        writer.join()
        server.close()
        staging.close()
    assert out.read_bytes() == raw.read_bytes()


def test_reads_past_a_failed_download_get_an_error_not_zeros(tmp_path):
    staging = Staging(tmp_path / "staged")
    staging.append(b"QFI\xfb" + bytes(1020))
    staging.finish(RuntimeError("connection lost"))
    server = NbdServer(staging, size=1 << 20, socket_path=tmp_path / "nbd.sock")
    try:
        result = subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "raw", server.url, str(tmp_path / "o")],
                                capture_output=True, text=True, timeout=60)
    finally:
        server.close()
        staging.close()
    assert result.returncode != 0
    assert "error" in result.stderr.lower()
