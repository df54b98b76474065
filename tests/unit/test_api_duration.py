"""Kubernetes duration strings read with Go's time.ParseDuration grammar: what CDI accepts, with its meaning."""

from __future__ import annotations

import datetime

import pytest

from cdi.api.duration import parse_duration

td = datetime.timedelta


@pytest.mark.parametrize(("text", "value"), [
    ("24h", td(hours=24)), ("12h0m0s", td(hours=12)), ("30s", td(seconds=30)), ("1h30m", td(minutes=90)),
    ("0", td(0)), ("0s", td(0)), ("-0", td(0)), ("+5m", td(minutes=5)), ("-1.5h", -td(minutes=90)),
    ("1.5h", td(minutes=90)), (".5s", td(milliseconds=500)), ("5.s", td(seconds=5)), ("300ms", td(milliseconds=300)),
    ("10us", td(microseconds=10)), ("10\u00b5s", td(microseconds=10)), ("10\u03bcs", td(microseconds=10)),
    ("2000ns", td(microseconds=2)), ("2h45m30.5s", td(hours=2, minutes=45, seconds=30.5)),
    ("1s1s", td(seconds=2)), ("2562047h", td(hours=2562047)),
])
def test_durations_go_accepts(text: str, value: datetime.timedelta):
    assert parse_duration(text) == value


@pytest.mark.parametrize("text", [
    "", "+", "-", "1", "5 s", "1d", "1w", "1H", "h", ".s", "1.2.3s", "1e3s", "1h 30m", " 1h", "1h-30m", "1hh",
    "2562048h",  # beyond the int64 of nanoseconds a Go Duration is
])
def test_durations_go_refuses(text: str):
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)
