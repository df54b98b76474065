import bz2
import gzip
import lzma
import os

import pytest
import zstandard

from importer.decompress import decompressed, detect
from importer.errors import ImportFailed, Reason

DATA = os.urandom(300_000) + bytes(700_000) + b"tail"


def chunks(blob: bytes, size: int = 4096) -> list[bytes]:
    return [blob[i : i + size] for i in range(0, len(blob), size)]


@pytest.mark.parametrize(
    ("layers", "compress"),
    [
        (["gz"], gzip.compress),
        (["xz"], lzma.compress),
        (["bz2"], bz2.compress),
        (["zst"], zstandard.ZstdCompressor().compress),
        (["xz", "gz"], lambda d: lzma.compress(gzip.compress(d))),
        ([], lambda d: d),
    ],
)
def test_layers_are_detected_and_peeled(layers, compress):
    found, stream = decompressed(chunks(compress(DATA)))
    assert found == layers
    assert b"".join(stream) == DATA


def test_concatenated_members_and_frames_are_all_read():
    # pigz/`zstd -T`/pbzip2 write several members; CDI-style readers stop after the first one.
    half = len(DATA) // 2
    for compress in (gzip.compress, bz2.compress, lzma.compress, zstandard.ZstdCompressor().compress):
        _, stream = decompressed(chunks(compress(DATA[:half]) + compress(DATA[half:])))
        assert b"".join(stream) == DATA


def test_truncated_stream_is_a_clear_failure():
    with pytest.raises(ImportFailed) as failure:
        b"".join(decompressed(chunks(gzip.compress(DATA)[:-100]))[1])
    assert failure.value.reason is Reason.UnsupportedFormat
    assert "gz" in failure.value.message


def test_bomb_is_read_in_bounded_pieces():
    # 64 MiB of zeros in a few KiB: the stream must come out in bounded chunks, never as one allocation.
    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    _, stream = decompressed([bomb])
    assert max(len(c) for c in stream) <= 1 << 20


def test_text_starting_with_bzh_is_not_bzip2():
    assert detect(b"BZh is not a header") is None
    assert detect(b"BZh91AY&SY") == "bz2"
