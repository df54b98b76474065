"""Issue 2's benchmark: `cdi import` next to CDI's own pipeline and next to the limit, in one run.

- qcow2 images served by nginx on 127.0.0.1 (1 GiB virtual / 512 MiB random data; 4 GiB / 2 GiB unless
  --quick), each into a directory (DEST/disk.img) and into a loop device:
  CDI's pipeline = `curl -o scratch/tmpimage` + `qemu-img convert -t writeback -p -O raw` + sync;
  ours = `cdi import` as a user types it (no --json: the JSON report adds a sha256 of the source, a core for
  a third of a second per GiB, which CDI's pipeline does not compute either);
  the limit = `qemu-img convert -t writeback -O raw` of the already-downloaded file + sync.
- raw.zst / raw.gz / raw.xz of a compressible 512 MiB disk: ours against `curl | <decompressor> > file` + sync.
- peak RSS of `cdi import` (and, apart, of qemu-img under it) and the sparseness of its disk.img, on the
  largest qcow2, whose result is first checked against the source with `qemu-img compare`.
Each time is the median of --runs runs; the variants of a case take turns, each going first in turn, and each
run's times go to stderr. Each goal's ratio is the median of the turns' ratios (bench.measure.Turns.ratio), the
ratio of the medians shown beside it. Goals are the issue's.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import subprocess
import sys
from pathlib import Path

from bench import images
from bench.images import GiB, MiB
from bench.loopdev import LoopDevice
from bench.measure import add_work_options, data_bytes, exit_on_sigterm, medians, peak_rss, sh, work_dir
from bench.report import Figure, median_figures, publish, ratio_figures
from tests.support.certs import make_ca
from tests.support.nginx import NginxServer

CDI_IMPORT = [sys.executable, "-m", "cdi.cli.main", "import", "--no-progress"]


def cdi_import(url: str, dest: Path) -> str:
    return shlex.join([*CDI_IMPORT, "--url", url, "--dest", str(dest)])


def qcow2_cases(nginx: NginxServer, image: Path, *, dest: Path, work: Path, runs: int) -> list[Figure]:
    url = nginx.url(image.name)
    scratch = work / "scratch" / "tmpimage"
    scratch.parent.mkdir(exist_ok=True)
    figures = []
    with contextlib.closing(LoopDevice(work / "loop.img", size=images.virtual_size(image) + 64 * MiB)) as loop:
        for target, dest_arg, out, clear in (("directory", dest, dest / "disk.img", (dest / "disk.img").unlink),
                                             ("loop device", loop.path, loop.path, loop.discard)):
            case = f"{image.name} → {target}"
            print(f"{case} ...", file=sys.stderr)

            def setup() -> None:
                scratch.unlink(missing_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    clear()

            q_out, q_scratch = shlex.quote(str(out)), shlex.quote(str(scratch))
            seconds = medians({
                "CDI's pipeline": lambda: sh(f"curl -sf -o {q_scratch} {shlex.quote(url)} && "
                                             f"qemu-img convert -t writeback -p -O raw {q_scratch} {q_out}"),
                "ours": lambda: sh(cdi_import(url, dest_arg)),
                "limit": lambda: sh(f"qemu-img convert -t writeback -O raw {shlex.quote(str(image))} {q_out}"),
            }, setup=setup, runs=runs)
            setup()
            figures += [*median_figures(case, seconds),
                        *ratio_figures(case, seconds, "ours", "CDI's pipeline", goal="≤ 0.5"),
                        *ratio_figures(case, seconds, "ours", "limit", goal="≤ 1.5")]
    return figures


def compressed_cases(nginx: NginxServer, compressed: dict[str, Path], *, dest: Path, runs: int) -> list[Figure]:
    disk = dest / "disk.img"
    figures = []
    for kind, path in compressed.items():
        url = nginx.url(path.name)
        case = f"{path.name} → directory"
        print(f"{case} ...", file=sys.stderr)
        seconds = medians({
            "curl | decompressor": lambda: sh(f"curl -sf {shlex.quote(url)} | {images.DECOMPRESSORS[kind]} > "
                                              f"{shlex.quote(str(disk))}"),
            "ours": lambda: sh(cdi_import(url, dest)),
        }, setup=lambda: disk.unlink(missing_ok=True), runs=runs)
        disk.unlink(missing_ok=True)
        figures += [*median_figures(case, seconds),
                    *ratio_figures(case, seconds, "curl | decompressor", "ours", goal="≥ 0.9",
                                   label="throughput ours / curl | decompressor")]
    return figures


def footprint(nginx: NginxServer, image: Path, *, dest: Path) -> list[Figure]:
    """Memory and sparseness of one more `cdi import` of ``image``, whose result must equal the source."""
    case = f"{image.name} → directory"
    print(f"{case}: peak RSS, sparseness ...", file=sys.stderr)
    disk = dest / "disk.img"
    disk.unlink(missing_ok=True)
    peaks = peak_rss([*CDI_IMPORT, "--url", nginx.url(image.name), "--dest", str(dest)])
    compare = subprocess.run(["qemu-img", "compare", "-f", "qcow2", "-F", "raw", str(image),
                              str(disk)], capture_output=True, text=True)
    if compare.returncode:
        raise RuntimeError(f"cdi import of {image.name} differs from the source: {compare.stdout}{compare.stderr}")
    allocated, nonzero = data_bytes(disk)
    disk.unlink()
    return [Figure(case, "peak RSS of cdi import itself", round(peaks.own / MiB, 1), "MiB", goal="≤ 128"),
            *(Figure(case, f"peak RSS of its child {name}", round(peak / MiB, 1), "MiB")
              for name, peak in sorted(peaks.children.items())),
            Figure(case, "peak RSS of the largest process (kernel's wait4 figure)", round(peaks.tree_max / MiB, 1),
                   "MiB"),
            Figure(case, "allocated blocks of disk.img", round(allocated / MiB, 1), "MiB"),
            Figure(case, "non-zero 4 KiB blocks of disk.img", round(nonzero / MiB, 1), "MiB"),
            Figure(case, "allocated / non-zero", round(allocated / max(nonzero, 1), 3), goal="≤ 1.05")]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench importer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the 4 GiB qcow2")
    parser.add_argument("--runs", type=int, default=6,
                        help="runs per variant, the median counts; a multiple of 3 and 2, the numbers of variants "
                             "that take turns, gives each variant each place equally often (default 6)")
    add_work_options(parser, holds="images, nginx, scratch, loop backing file")
    parser.add_argument("--dest", type=Path,
                        help="the Filesystem target directory (its disk.img is replaced; default: in the work dir)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures: list[Figure] = []
    with work_dir(args.workdir, prefix="kubecdi-bench-", keep=args.keep) as work:
        dest = args.dest or work / "pvc"
        dest.mkdir(parents=True, exist_ok=True)
        ca = make_ca(work / "tls")
        nginx = NginxServer(work / "nginx", cert=ca.server_cert, key=ca.server_key)
        try:
            print(f"building images in {nginx.root} ...", file=sys.stderr)
            sizes = (1,) if args.quick else (1, 4)
            qcow2s = [images.make_qcow2(nginx.root, virtual=gib * GiB, scratch=work) for gib in sizes]
            compressed = images.make_compressed(nginx.root, size=512 * MiB, scratch=work)
            for image in qcow2s:
                figures += qcow2_cases(nginx, image, dest=dest, work=work, runs=args.runs)
            figures += compressed_cases(nginx, compressed, dest=dest, runs=args.runs)
            figures += footprint(nginx, qcow2s[-1], dest=dest)
        finally:
            nginx.close()
    publish(figures, json_out=args.json_out)
    return 0
