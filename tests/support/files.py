"""Putting test files where a server serves them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def publish(root: Path, path: Path, name: str | None = None) -> str:
    """Serve ``path`` from the directory ``root`` as ``name`` (default: its own name); returns the name.

    Hard-linked when possible: the session's images are served by many servers without copying them.
    """
    name = name or path.name
    target = root / name
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, target)
    except OSError:
        shutil.copyfile(path, target)
    return name
