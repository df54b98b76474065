"""`cdi`: the user's command line. One entry point, subcommands in their own modules."""

from __future__ import annotations

import argparse
import sys

from cdi.cli import imageupload, importcmd, local, uploadpki


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cdi", description="kubecdi: KubeVirt's Containerized Data Importer, in Python")
    commands = parser.add_subparsers(dest="command", required=True)
    importcmd.register(commands)
    imageupload.register(commands)
    uploadpki.register(commands)
    local.register(commands)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
