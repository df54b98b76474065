"""The S3 source on its own against a real S3 server (SeaweedFS): bytes, resume offsets, how failures are classified.

`cdi import --source s3` end to end (qcow2 and compressed raw into disk.img, a cut connection, the pod's env
contract) is in test_s3_import.py.
"""

from __future__ import annotations

import random
import socket
from contextlib import closing

import pytest

from importer.errors import ImportFailed, Reason
from importer.sources import open_source
from importer.sources.base import Source, SourceOptions, Transient
from importer.sources.s3 import parse_url
from tests.support import certs
from tests.support.seaweed import ACCESS_KEY, SECRET_KEY, SeaweedS3
from tests.support.tlsrelay import TlsRelay

MIB = 1 << 20
# Not a multiple of the 1 MiB chunk, so the last chunk is a short one.
DATA = random.Random(3).randbytes(3 * MIB + 12345)


@pytest.fixture(scope="module")
def object_url(s3_server: SeaweedS3) -> str:
    return s3_server.put("cdi-source", "images/disk.img", DATA)


def s3_source(url: str, *, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY, **options: object) -> Source:
    return open_source("s3", SourceOptions(url=url, access_key=access_key, secret_key=secret_key,
                                           **options))  # type: ignore[arg-type]


def refusal(source: Source) -> ImportFailed:
    with closing(source), pytest.raises(ImportFailed) as caught:
        source.probe()
    assert "\n" not in caught.value.message
    return caught.value


def test_stream_is_the_object_in_bounded_chunks(object_url: str) -> None:
    with closing(s3_source(object_url)) as source:
        probe = source.probe()
        assert (probe.size, probe.resumable) == (len(DATA), True)
        chunks = list(source.stream(0))
    assert b"".join(chunks) == DATA
    assert max(map(len, chunks)) <= MIB  # memory stays bounded whatever the object's size
    assert source.received == len(DATA)


@pytest.mark.parametrize("offset", [1, MIB, len(DATA) - 1])
def test_stream_resumes_at_an_offset(offset: int, object_url: str) -> None:
    with closing(s3_source(object_url)) as source:
        source.probe()
        assert b"".join(source.stream(offset)) == DATA[offset:]
        assert source.received == len(DATA) - offset  # a ranged GET: nothing before the offset is fetched


@pytest.mark.parametrize(("keys", "reason"), [
    ((ACCESS_KEY, "not-the-secret"), Reason.Unauthorized),  # SignatureDoesNotMatch
    (("nobody", SECRET_KEY), Reason.Unauthorized),  # InvalidAccessKeyId
    (("", ""), Reason.Unauthorized),  # anonymous: the bucket is not public
], ids=["wrong-secret", "unknown-key", "anonymous"])
def test_credentials_refused(keys: tuple[str, str], reason: Reason, object_url: str) -> None:
    error = refusal(s3_source(object_url, access_key=keys[0], secret_key=keys[1]))
    assert error.reason is reason
    assert "s3://cdi-source/images/disk.img" in error.message


@pytest.mark.parametrize("where", ["cdi-source/images/missing.img", "no-such-bucket/images/disk.img"],
                         ids=["missing-object", "missing-bucket"])
def test_missing_is_not_found(where: str, s3_server: SeaweedS3, object_url: str) -> None:
    error = refusal(s3_source(f"{s3_server.endpoint}/{where}"))
    assert error.reason is Reason.NotFound
    assert f"s3://{where}" in error.message


def test_refused_connection_is_transient_and_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the source tries it: nothing listens there
    with closing(s3_source(f"http://127.0.0.1:{port}/cdi-source/disk.img")) as source, \
            pytest.raises(Transient) as caught:
        source.probe()
    assert caught.value.unreachable


def test_object_replaced_between_probe_and_resume(s3_server: SeaweedS3) -> None:
    url = s3_server.put("cdi-source", "images/replaced.img", DATA[:MIB])
    with closing(s3_source(url)) as source:
        source.probe()
        s3_server.put("cdi-source", "images/replaced.img", DATA[MIB:2 * MIB])
        with pytest.raises(ImportFailed) as caught:
            b"".join(source.stream(4096))
    # Resuming would splice two different objects into one disk.
    assert caught.value.reason is Reason.TransferFailed
    assert "changed" in caught.value.message


def test_https_endpoint_with_a_private_ca(s3_server: SeaweedS3, object_url: str, tls_ca: certs.TestCA,
                                          other_ca: certs.TestCA) -> None:
    relay = TlsRelay(target_port=s3_server.port, context=tls_ca.server_context())
    try:
        url = object_url.replace(s3_server.endpoint, f"https://127.0.0.1:{relay.port}")
        with closing(s3_source(url, cert_dir=str(tls_ca.cert_dir))) as source:
            source.probe()
            assert b"".join(source.stream(MIB)) == DATA[MIB:]
        error = refusal(s3_source(url, cert_dir=str(other_ca.cert_dir)))
        assert error.reason is Reason.TLSError
        with closing(s3_source(url, insecure=True)) as source:
            assert source.probe().size == len(DATA)
    finally:
        relay.close()


def test_denied_endpoint_is_refused_before_any_request() -> None:
    with pytest.raises(ImportFailed) as caught:
        s3_source("http://169.254.169.254/bucket/disk.img")
    assert caught.value.reason is Reason.URLDenied


@pytest.mark.parametrize(("url", "expected"), [
    ("http://127.0.0.1:9000/bucket/dir/disk.img", ("http://127.0.0.1:9000", "us-east-1", "bucket", "dir/disk.img")),
    ("https://s3.eu-west-3.amazonaws.com/b/k%20x.qcow2",
     ("https://s3.eu-west-3.amazonaws.com", "eu-west-3", "b", "k x.qcow2")),
    ("https://s3-us-west-2.amazonaws.com/b/k", ("https://s3-us-west-2.amazonaws.com", "us-west-2", "b", "k")),
])
def test_url_forms(url: str, expected: tuple[str, str, str, str]) -> None:
    assert parse_url(url) == expected


@pytest.mark.parametrize("url", ["s3://bucket/key", "http://127.0.0.1:9000/bucket", "http://127.0.0.1:9000/"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(ImportFailed) as caught:
        parse_url(url)
    assert caught.value.reason is Reason.InvalidArgument
    assert "http(s)://endpoint/bucket/object" in caught.value.message
