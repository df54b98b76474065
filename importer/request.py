"""Building an ImportRequest from CDI's importer environment (the pod's front door)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from importer import contract as c
from importer.errors import ImportFailed, Reason
from importer.pipeline import ImportRequest
from importer.quantity import parse_quantity
from importer.sources.base import SourceOptions
from importer.transfer import RetryPolicy

_BOOL = {"true": True, "false": False, "": False}


def from_env(env: Mapping[str, str]) -> ImportRequest:
    source = env.get(c.SOURCE, "") or c.SOURCE_HTTP
    content_type = env.get(c.CONTENT_TYPE, "") or c.CONTENT_KUBEVIRT
    data_dir = env.get(c.DATA_DIR, "") or c.DEFAULT_DATA_DIR
    block_path = env.get(c.BLOCK_PATH, "") or c.DEFAULT_BLOCK_PATH
    # CDI tells Block from Filesystem by the device node's existence (cdi-facts §3.3).
    dest = block_path if Path(block_path).exists() else data_dir
    headers = []
    for i in range(0, 1000):
        line = env.get(f"{c.EXTRA_HEADER_PREFIX}{i}")
        if line is None:
            break
        name, sep, value = line.partition(":")
        if not sep:
            raise ImportFailed(Reason.InvalidArgument, f"extra header {i} is not 'Name: value': {line!r}")
        headers.append((name.strip(), value.strip()))
    stall = float(env.get(c.STALL_TIMEOUT, "") or 600)
    options = SourceOptions(
        url=env.get(c.ENDPOINT, ""),
        access_key=env.get(c.ACCESS_KEY_ID, ""),
        secret_key=env.get(c.SECRET_KEY, ""),
        cert_dir=env.get(c.CERT_DIR) or None,
        insecure=_flag(env, c.INSECURE_TLS),
        headers=tuple(headers),
        architecture=env.get(c.REGISTRY_IMAGE_ARCHITECTURE) or None,
        stall_timeout=stall,
        url_allow=tuple(filter(None, env.get(c.URL_ALLOW, "").split(","))),
        url_deny=tuple(filter(None, env.get(c.URL_DENY, "").split(","))),
    )
    size_text = env.get(c.IMAGE_SIZE, "")
    return ImportRequest(
        source=source,
        options=options,
        dest=dest,
        size=parse_quantity(size_text) if size_text else None,
        checksum=env.get(c.CHECKSUM) or None,
        content_type=content_type,
        filesystem_overhead=float(env.get(c.FILESYSTEM_OVERHEAD, "") or 0),
        preallocation=_flag(env, c.PREALLOCATION),
        retry=RetryPolicy(stall_timeout=stall),
        report_sha256=False,
    )


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value not in _BOOL:
        raise ImportFailed(Reason.InvalidArgument, f"{name} must be true or false, not {value!r}")
    return _BOOL[value]
