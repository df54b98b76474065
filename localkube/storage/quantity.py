"""Kubernetes resource quantities ("1Gi", "500M", "1.5Gi", "1e9") as whole bytes."""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_SUFFIXES = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(text: str) -> int:
    """Bytes, rounded up (a volume is never smaller than asked); ValueError with the reason otherwise."""
    match = _QUANTITY.match(str(text).strip())
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"invalid quantity {text!r}: expected a number with an optional suffix like Mi or G")
    try:
        value = Decimal(match.group(1)) * _SUFFIXES[match.group(2)]
    except InvalidOperation:
        raise ValueError(f"invalid quantity {text!r}: {match.group(1)!r} is not a number") from None
    return int(value.to_integral_value(rounding=ROUND_CEILING))
