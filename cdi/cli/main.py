"""`cdi`: the user's command line. One entry point, subcommands in their own modules."""

from __future__ import annotations

import argparse
import importlib
import sys

from importer.process import without_teardown

# Each subcommand's module registers its own parser. Only the one asked for is loaded: the others pull in
# cryptography, JWT and Kubernetes code, a tenth of a second that `cdi import` of a small image would feel.
COMMANDS = {"import": "cdi.cli.importcmd", "image-upload": "cdi.cli.imageupload",
            "upload-pki": "cdi.cli.uploadpki", "local": "cdi.cli.local"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="cdi", description="kubecdi: KubeVirt's Containerized Data Importer, in Python")
    commands = parser.add_subparsers(dest="command", required=True)
    wanted = [argv[0]] if argv and argv[0] in COMMANDS else list(COMMANDS)
    for name in wanted:
        importlib.import_module(COMMANDS[name]).register(commands, name)
    args = parser.parse_args(argv)
    return int(args.run(args))


run = without_teardown(main)


if __name__ == "__main__":
    run()
