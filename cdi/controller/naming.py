"""Names of the objects the controller generates, by CDI's rule (cdi-facts §3.1).

Names must stay what CDI would choose: a controller restarted mid-import (ours or CDI's) finds the importer
pod by name, and users and tools look for ``importer-<pvc>``.
"""

from __future__ import annotations

MAX_NAME = 253
MAX_SERVICE_NAME = 63
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a_32(text: str) -> str:
    """FNV-1a 32-bit hash of ``text`` as 8 lower-case hex digits."""
    value = _FNV_OFFSET
    for byte in text.encode():
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return f"{value:08x}"


def generated_name(base: str, suffix: str, *, max_length: int = MAX_NAME) -> str:
    """``base-suffix``, shortened with a hash of ``base`` when too long (openshift's ``naming.GetName``)."""
    name = f"{base}-{suffix}"
    if len(name) <= max_length:
        return name
    keep = max_length - 10 - len(suffix)
    if keep > 0:
        return f"{base[:keep]}-{fnv1a_32(base)}-{suffix}"
    return f"{base[:max_length - 9]}-{fnv1a_32(name)}"[:max_length]


def importer_pod_name(pvc_name: str) -> str:
    return generated_name("importer", pvc_name)


def service_name(name: str) -> str:
    """A DNS-1035 label for a Service: dots become dashes; long names are shortened by the hash rule."""
    dashed = name.replace(".", "-")
    return dashed if len(dashed) <= MAX_SERVICE_NAME else generated_name(dashed, "cdi", max_length=MAX_SERVICE_NAME)
