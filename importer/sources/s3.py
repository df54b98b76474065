"""S3 source: CDI's path-style URL (``http(s)://endpoint/bucket/key``), streamed with ranged GETs.

Ranged GETs pinned to the object's ETag make the stream resumable, so a dropped connection continues
where it stopped and qcow2 images convert through the memory window like HTTP ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

import boto3
import botocore.exceptions as bex
import urllib3
from botocore import UNSIGNED
from botocore.config import Config

from importer.errors import ImportFailed, Reason
from importer.sources.base import Probe, Source, SourceOptions, Transient
from importer.tls import verify_setting
from importer.urlpolicy import UrlPolicy

CHUNK = 1 << 20
_REGION = re.compile(r"^s3[.-]([a-z0-9-]+)\.amazonaws\.com$")
_NOT_FOUND = {"404", "NoSuchKey", "NoSuchBucket", "NotFound"}
_DENIED = {"401", "403", "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "Forbidden"}


def parse_url(url: str) -> tuple[str, str, str, str]:
    """(endpoint URL, region, bucket, key) of CDI's S3 URL form."""
    parts = urlsplit(url)
    bucket, _, key = parts.path.lstrip("/").partition("/")
    if parts.scheme not in ("http", "https") or not parts.hostname or not bucket or not key:
        raise ImportFailed(Reason.InvalidArgument, f"invalid S3 URL {url!r}: expected http(s)://endpoint/bucket/object")
    match = _REGION.match(parts.hostname)
    region = match[1] if match else "us-east-1"
    return f"{parts.scheme}://{parts.netloc}", region, unquote(bucket), unquote(key)


class S3Source(Source):
    kind = "s3"

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        UrlPolicy.from_lists(allow=options.url_allow, deny=options.url_deny).check(options.url)
        endpoint, region, self.bucket, self.key = parse_url(options.url)
        if options.insecure:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # asked for: once, not per request
        config = Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},  # the pipeline retries, with its own back-off and stall limit
            connect_timeout=min(30.0, options.stall_timeout),
            read_timeout=options.stall_timeout,
            signature_version=None if options.access_key else UNSIGNED,
        )
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint, region_name=region, config=config,
            aws_access_key_id=options.access_key or None, aws_secret_access_key=options.secret_key or None,
            verify=verify_setting(cert_dir=options.cert_dir, insecure=options.insecure))
        self.etag = ""

    def probe(self) -> Probe:
        head = self._call(self.client.head_object, Bucket=self.bucket, Key=self.key)
        self.etag = str(head.get("ETag", ""))
        return Probe(size=int(head["ContentLength"]), resumable=True)

    def stream(self, offset: int) -> Iterator[bytes]:
        extra = {"IfMatch": self.etag} if self.etag else {}
        response = self._call(self.client.get_object, Bucket=self.bucket, Key=self.key, Range=f"bytes={offset}-",
                              **extra)
        body = response["Body"]
        try:
            for chunk in body.iter_chunks(CHUNK):
                self.received += len(chunk)
                yield chunk
        except (bex.BotoCoreError, OSError) as error:
            raise Transient(f"S3 transfer from {self.options.url} broke: {error}") from error
        finally:
            body.close()

    def close(self) -> None:
        self.client.close()

    def _call(self, method, **kwargs):  # type: ignore[no-untyped-def]
        where = f"s3://{self.bucket}/{self.key}"
        try:
            return method(**kwargs)
        except bex.ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            status = str(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in _NOT_FOUND or status == "404":
                raise ImportFailed(Reason.NotFound, f"{where}: {code or status} not found") from error
            if code in _DENIED or status in ("401", "403"):
                raise ImportFailed(Reason.Unauthorized, f"{where}: {code or status}") from error
            if code == "PreconditionFailed" or status == "412":
                raise ImportFailed(Reason.TransferFailed,
                                   f"{where} changed during the transfer; start again") from error
            raise Transient(f"{where}: {code or status} {error}") from error
        except bex.SSLError as error:
            raise ImportFailed(Reason.TLSError, f"TLS with {self.options.url} failed: {error}") from error
        except (bex.EndpointConnectionError, bex.ConnectTimeoutError) as error:
            raise Transient(f"cannot reach {self.options.url}: {error}", unreachable=True) from error
        except (bex.BotoCoreError, OSError) as error:
            raise Transient(f"{where}: {error}") from error


def open_source(options: SourceOptions) -> Source:
    return S3Source(options)
