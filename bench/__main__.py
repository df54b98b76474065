"""`python -m bench [importer|sources|datavolumes|localkube|upload] [options]` — runs the benchmarks (all of them when
none is named)."""

import sys

from bench import datavolumes, importer, localkube_scale, sources, upload

BENCHES = {"importer": importer.main, "sources": sources.main, "datavolumes": datavolumes.main,
           "localkube": localkube_scale.main, "upload": upload.main}

if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] in BENCHES:
        sys.exit(BENCHES[args[0]](args[1:]))
    sys.exit(max(bench(args if name == "importer" else []) for name, bench in BENCHES.items()))
