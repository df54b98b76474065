import hashlib

import pytest

from importer.checksum import Expected, Hashes
from importer.errors import ImportFailed, Reason
from importer.progress import CONVERTING, Progress, Throttled
from importer.quantity import parse_quantity
from importer.targets import usable_space


@pytest.mark.parametrize(("text", "value"), [
    ("1Gi", 1 << 30), ("500M", 500_000_000), ("1138166334", 1138166334), ("1.5Ki", 1536), ("1e3", 1000)])
def test_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1Gb", "-1Gi", "abc"])
def test_bad_quantities(text):
    with pytest.raises(ImportFailed):
        parse_quantity(text)


def test_usable_space_matches_cdis_example():
    # cdi-facts: PVC request 1Gi with overhead 0.06 gives 1012924416 bytes (966 MiB).
    assert usable_space(1 << 30, 0.06) == 1012924416


@pytest.mark.parametrize("algorithm", ["md5", "sha1", "sha256", "sha512"])
def test_checksums(algorithm):
    digest = hashlib.new(algorithm, b"abc").hexdigest()
    good = Hashes(Expected(f"{algorithm}:{digest.upper()}"), report_sha256=False)
    good.update(b"abc")
    good.verify()
    bad = Hashes(Expected(f"{algorithm}:{digest}"), report_sha256=True)
    bad.update(b"abd")
    with pytest.raises(ImportFailed) as failure:
        bad.verify()
    assert failure.value.reason is Reason.ChecksumMismatch


@pytest.mark.parametrize("spec", ["sha256", "crc32:00", "sha256:xyz", "md5:" + "0" * 31])
def test_bad_checksum_specs(spec):
    with pytest.raises(ImportFailed) as failure:
        Expected(spec)
    assert failure.value.reason is Reason.InvalidArgument


def test_progress_never_goes_backwards_and_says_100_only_at_the_end():
    seen = []
    progress = Progress([lambda s: seen.append(s.percent)], min_interval=0)
    progress.transferred(50, 100)
    progress.converting(20.0)  # conversion lags the download
    progress.converting(10.0)
    progress.transferred(100, 100)
    progress.converting(100.0)
    assert max(seen) < 100
    progress.complete()
    assert seen == sorted(seen) and seen[-1] == 100.0


def test_a_listener_added_during_an_import_hears_where_it_stands_at_once():
    progress = Progress(min_interval=60)
    progress.transferred(30, 100)
    seen = []
    progress.add_listener(lambda s: seen.append(s.percent))
    assert seen == [30.0]


def test_a_throttled_listener_hears_every_phase_but_not_every_update():
    seen = []
    progress = Progress([Throttled(lambda s: seen.append((s.phase, s.percent)), seconds=60)], min_interval=0)
    for done in range(0, 101, 10):
        progress.transferred(done, 100)
    progress.converting(50.0)
    progress.complete()
    assert seen == [("Transferring", 0.0), (CONVERTING, 99.9), ("Complete", 100.0)]
