"""`python -m bench [importer|sources] [options]` — runs the benchmarks (all of them when none is named)."""

import sys

from bench import importer, sources

BENCHES = {"importer": importer.main, "sources": sources.main}

if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] in BENCHES:
        sys.exit(BENCHES[args[0]](args[1:]))
    sys.exit(max(bench(args if name == "importer" else []) for name, bench in BENCHES.items()))
