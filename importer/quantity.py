"""Kubernetes resource quantities ("1Gi", "500M", "1138166334", "1e3") as byte counts."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from importer.errors import ImportFailed, Reason

_SUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(text: str) -> int:
    """Bytes, rounded up as Kubernetes does for storage requests."""
    match = _QUANTITY.match(text.strip())
    if not match or match[2] not in _SUFFIX:
        raise ImportFailed(Reason.InvalidArgument, f"invalid quantity {text!r}")
    try:
        value = Decimal(match[1]) * _SUFFIX[match[2]]
    except InvalidOperation as error:
        raise ImportFailed(Reason.InvalidArgument, f"invalid quantity {text!r}") from error
    return int(math.ceil(value))
