"""Image mapping: images are never pulled, a container runs a program of this machine.

`images` maps a repository name to the argv of a local entry point, playing the image's ENTRYPOINT: an
image matches when its repository (the reference without tag or digest) is that name or ends in `/<name>`.
So `{"cdi-importer": ["/venv/bin/cdi-importer"]}` runs `quay.io/kubevirt/cdi-importer:v1.60.0` and
`cdi-importer:latest` as that console script; `console_script_images(...)` builds such entries from the
console scripts next to `sys.executable`. As with a real image, a container's `command` replaces the entry
point and its `args` follow. Any other image (`busybox`, `alpine`, ...) runs the pod's `command` + `args` as
given, found on this machine's PATH; with no command it cannot run, and the container says so.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ImageMap = Mapping[str, Sequence[str]]


class CannotRun(Exception):
    """The container has nothing to run (reported as the container's ContainerCannotRun message)."""


def repository(image: str) -> str:
    name = image.split("@", 1)[0]
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > last_slash else name


def container_argv(images: ImageMap, *, image: str, command: Sequence[str] | None, args: Sequence[str] | None
                   ) -> list[str]:
    repo = repository(image)
    entry = next((list(argv) for name, argv in images.items() if repo == name or repo.endswith("/" + name)), None)
    argv = list(command) if command else entry
    if not argv:
        raise CannotRun(f"image {image!r} is not mapped to a local entry point and the container has no "
                        "command: localkube runs images as local programs and never pulls them")
    return argv + list(args or [])


def console_script_images(*names: str) -> dict[str, list[str]]:
    """{name: [<bin dir of this Python>/name]}: images named after console scripts of this environment."""
    bindir = Path(sys.executable).parent
    return {name: [str(bindir / name)] for name in names}
