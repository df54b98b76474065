#!/bin/sh
# Installs kubecdi from a source tree into a virtualenv, with the Debian packages it runs with.
# Usage: install.sh SOURCE_DIR PREFIX     (the Dockerfile runs it; so does tests/integration/test_image.py)
set -eu
src=$1
prefix=$2
export DEBIAN_FRONTEND=noninteractive
missing=""
for p in python3 python3-venv qemu-utils ca-certificates openssl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing
  rm -rf /var/lib/apt/lists/*
fi
python3 -m venv "$prefix"
"$prefix/bin/pip" install -q --no-cache-dir --disable-pip-version-check "$src"
for program in cdi cdi-importer; do
  "$prefix/bin/$program" --help >/dev/null 2>&1 || [ "$program" = cdi-importer ]
done
"$prefix/bin/python" -c 'import importer.pipeline, cdi.cli.main'
