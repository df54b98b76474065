"""Issue 2's benchmark: `cdi import` against CDI's pipeline and against the limit, side by side.

- qcow2 (1 GiB virtual / 512 MiB random data; 4 GiB / 2 GiB unless --quick) served by nginx on 127.0.0.1,
  into a directory (disk.img) and into a loop device:
  CDI's pipeline = `curl -o scratch/tmpimage` + `qemu-img convert -t writeback -p -O raw` + sync;
  ours = `cdi import`; the limit = `qemu-img convert` of the already-downloaded file + sync.
- raw.zst / raw.gz / raw.xz: ours against `curl | <decompressor> > file` + sync (throughput ratio).
- peak RSS of `cdi import` itself (qemu-img apart) at the largest image; sparseness of disk.img.
Each cell is the median of --runs runs. Goals from the issue; the table says pass or miss.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.nginx import Nginx

MiB = 1 << 20
CDI = [sys.executable, "-m", "cdi.cli.main", "import", "--no-progress", "--json"]


def sh(cmd: str) -> None:
    subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], check=True, stdout=subprocess.DEVNULL)


def timed(setup: Callable[[], None], run: Callable[[], None], runs: int) -> float:
    times = []
    for _ in range(runs):
        setup()
        os.sync()
        start = time.monotonic()
        run()
        os.sync()
        times.append(time.monotonic() - start)
    return statistics.median(times)


def make_qcow2(work: Path, virtual_gib: int) -> Path:
    raw = work / f"src{virtual_gib}.raw"
    with raw.open("wb") as f:
        f.truncate(virtual_gib << 30)
        for offset in range(0, virtual_gib << 30, 8 * MiB):  # 4 MiB of random data, then a 4 MiB hole
            f.seek(offset)
            f.write(os.urandom(4 * MiB))
    out = work / "www" / f"disk{virtual_gib}g.qcow2"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(out)], check=True)
    raw.unlink()
    return out


def make_compressed(work: Path, mib: int) -> dict[str, Path]:
    raw = work / "mixed.raw"
    # Real binaries and text, like a disk's contents, and a tail of zeros.
    sh(f"(tar cf - /usr/lib /usr/share 2>/dev/null | head -c {mib * 3 // 4 * MiB}; "
       f"head -c {mib // 4 * MiB} /dev/zero) > {raw}")
    out = {}
    for kind, cmd in (("zst", "zstd -q -3 -T0 -c"), ("gz", "pigz -6 -c"), ("xz", "xz -3 -T2 -c")):
        out[kind] = work / "www" / f"mixed.raw.{kind}"
        sh(f"{cmd} {raw} > {out[kind]}")
    raw.unlink()
    return out


class Loop:
    def __init__(self, work: Path, size: int) -> None:
        self.backing = work / "loop.img"
        with self.backing.open("wb") as f:
            f.truncate(size)
        self.device = subprocess.run(["losetup", "-f", "--show", str(self.backing)], check=True,
                                     capture_output=True, text=True).stdout.strip()

    def close(self) -> None:
        subprocess.run(["losetup", "-d", self.device], check=False)
        self.backing.unlink(missing_ok=True)


def peak_rss_of_cdi(url: str, dest: Path) -> tuple[int, int]:
    """(cdi's own peak RSS, qemu-img's) in bytes: VmHWM polled from /proc, since both are one process tree."""
    process = subprocess.Popen([*CDI, "--url", url, "--dest", str(dest)], stdout=subprocess.DEVNULL)
    peaks = {"cdi": 0, "qemu-img": 0}

    def hwm(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    while process.poll() is None:
        peaks["cdi"] = max(peaks["cdi"], hwm(process.pid))
        for child in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split() if Path(
                f"/proc/{process.pid}/task/{process.pid}/children").exists() else []:
            peaks["qemu-img"] = max(peaks["qemu-img"], hwm(int(child)))
        time.sleep(0.02)
    return peaks["cdi"], peaks["qemu-img"]


def nonzero_bytes(path: Path, length: int) -> int:
    count = 0
    with path.open("rb") as f:
        while length > 0 and (block := f.read(min(length, 4 * MiB))):
            for at in range(0, len(block), 4096):
                if block[at : at + 4096].count(0) != len(block[at : at + 4096]):
                    count += 4096
            length -= len(block)
    return count


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench importer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the 1 GiB image, 256 MiB compressed raw")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kubecdi-bench-", dir=args.workdir))
    work.chmod(0o755)  # nginx's workers are not root
    (work / "www").mkdir(mode=0o755)
    rows: list[dict[str, object]] = []
    nginx = loop = None
    try:
        print("building images ...", file=sys.stderr)
        images = [make_qcow2(work, 1)] + ([] if args.quick else [make_qcow2(work, 4)])
        compressed = make_compressed(work, 256 if args.quick else 512)
        nginx = Nginx(work / "www", work / "nginx")
        pvc, scratch = work / "pvc", work / "scratch"
        pvc.mkdir()
        scratch.mkdir()
        for image in images:
            virtual = int(json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(image)],
                                                    capture_output=True, check=True).stdout)["virtual-size"])
            loop = Loop(work, virtual + 64 * MiB)
            for target_name, dest, out in (("directory", pvc, pvc / "disk.img"), ("loop device", Path(loop.device),
                                                                                  Path(loop.device))):
                url = nginx.url(image.name)

                def clean() -> None:
                    for p in (pvc / "disk.img", scratch / "tmpimage"):
                        p.unlink(missing_ok=True)

                print(f"{image.name} → {target_name} ...", file=sys.stderr)
                cdi_way = timed(clean, lambda: sh(f"curl -s -o {scratch}/tmpimage {url} && qemu-img convert -t "
                                                  f"writeback -p -O raw {scratch}/tmpimage {out}"), args.runs)
                ours = timed(clean, lambda: sh(" ".join([*CDI, "--url", url, "--dest", str(dest)])), args.runs)
                limit = timed(clean, lambda: sh(f"qemu-img convert -t writeback -O raw {image} {out}"), args.runs)
                rows.append({"case": f"{image.name} → {target_name}", "ours_s": round(ours, 2),
                             "cdi_s": round(cdi_way, 2), "limit_s": round(limit, 2),
                             "ours/cdi": round(ours / cdi_way, 2), "goal ours/cdi": "≤ 0.5",
                             "ours/limit": round(ours / limit, 2), "goal ours/limit": "≤ 1.5"})
            loop.close()
            loop = None
        for kind, path in compressed.items():
            url = nginx.url(path.name)
            out = pvc / "disk.img"
            tool = {"zst": "zstd -dc", "gz": "gzip -dc", "xz": "xz -dc"}[kind]
            print(f"{path.name} ...", file=sys.stderr)
            clean = lambda: out.unlink(missing_ok=True)  # noqa: E731
            theirs = timed(clean, lambda: sh(f"curl -s {url} | {tool} > {out}"), args.runs)
            ours = timed(clean, lambda: sh(" ".join([*CDI, "--url", url, "--dest", str(out)])), args.runs)
            rows.append({"case": f"{path.name} → file", "ours_s": round(ours, 2), "curl|decompress_s": round(theirs, 2),
                         "throughput ours/theirs": round(theirs / ours, 2), "goal": "≥ 0.9"})
        largest = images[-1]
        (pvc / "disk.img").unlink(missing_ok=True)
        own, qemu_peak = peak_rss_of_cdi(nginx.url(largest.name), pvc)
        rows.append({"case": f"peak RSS, {largest.name}", "cdi_MiB": round(own / MiB, 1),
                     "qemu-img_MiB": round(qemu_peak / MiB, 1), "goal": "cdi ≤ 128 MiB"})
        disk = pvc / "disk.img"
        virtual = int(json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(largest)],
                                                capture_output=True, check=True).stdout)["virtual-size"])
        allocated = disk.stat().st_blocks * 512
        rows.append({"case": f"sparseness, {largest.name}", "allocated_MiB": round(allocated / MiB, 1),
                     "nonzero_MiB": round(nonzero_bytes(disk, virtual) / MiB, 1),
                     "allocated/nonzero": round(allocated / max(1, nonzero_bytes(disk, virtual)), 3), "goal": "≤ 1.05"})
    finally:
        if loop:
            loop.close()
        if nginx:
            nginx.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for row in rows:
        print("| " + " | ".join(f"{k}: {v}" for k, v in row.items()) + " |")
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))
    return 0
