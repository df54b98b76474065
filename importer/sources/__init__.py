"""Sources by CDI name. Each module exposes ``open_source(options) -> Source``."""

from __future__ import annotations

import importlib

from importer.errors import ImportFailed, Reason
from importer.sources.base import Source, SourceOptions

# CDI's IMPORTER_SOURCE values → the module implementing them.
_MODULES = {
    "http": "importer.sources.http",
    "s3": "importer.sources.s3",
    "registry": "importer.sources.registry",
}


def open_source(kind: str, options: SourceOptions) -> Source:
    """The source for a CDI source kind; unknown kinds are CDI's "Unknown data source"."""
    module = _MODULES.get(kind)
    if module is None:
        raise ImportFailed(Reason.InvalidArgument, f"Unknown data source: {kind}")
    return importlib.import_module(module).open_source(options)
