"""Kubernetes duration strings (``metav1.Duration``), read as Go's ``time.ParseDuration`` reads them.

The CDI CR's ``spec.certConfig`` holds them ("24h", "12h0m0s", "1h30m"); reading them with Go's grammar means a
value CDI accepts is accepted here with the same meaning, and one it refuses is refused here too.
"""

from __future__ import annotations

import datetime
import re
from fractions import Fraction

_NANOSECONDS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
                "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_TERM = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_RANGE = 1 << 63  # Go keeps a Duration in an int64 of nanoseconds


def parse_duration(text: str) -> datetime.timedelta:
    """``text`` as a duration, to the microsecond; ValueError for anything Go's parser refuses."""
    sign, body = (-1, text[1:]) if text.startswith("-") else (1, text.removeprefix("+"))
    if body == "0":  # the only number Go accepts without a unit
        return datetime.timedelta(0)
    terms = list(_TERM.finditer(body))
    if not body or "".join(t.group(0) for t in terms) != body:
        raise ValueError(f"invalid duration {text!r}")
    nanoseconds = sum(Fraction(t.group(1)) * _NANOSECONDS[t.group(2)] for t in terms)
    if nanoseconds > (_RANGE if sign < 0 else _RANGE - 1):
        raise ValueError(f"invalid duration {text!r}: out of range")
    return sign * datetime.timedelta(microseconds=int(nanoseconds) / 1000)
