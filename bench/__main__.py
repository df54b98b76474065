"""`python -m bench [importer] [options]` — runs the benchmarks (see each module)."""

import sys

from bench import importer

if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "importer":
        args = args[1:]
    sys.exit(importer.main(args))
