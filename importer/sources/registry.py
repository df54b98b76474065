"""Registry source (pod pull): the KubeVirt containerDisk's one file under ``disk/``, streamed out of its layer.

Nothing is unpacked to disk and no layer is held in memory: the layer blob streams through its digest
check and decompressor into a tar reader, and the disk file's bytes go straight to the pipeline. Layers
are read top-down, so the file that wins under overlay rules is found first; the layers below are then
read only to enforce "exactly one file" and to verify their digests. A violation found after the file
was streamed fails the import, which is then never marked done.

Every byte read from the registry is checked: manifests against a digest reference, configs, child
manifests and layers against the digest and size their descriptor gives.
"""

from __future__ import annotations

import hashlib
import json
import platform
import posixpath
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import requests
import urllib3

from importer.decompress import ChunkReader, decompressed
from importer.errors import ImportFailed, Reason
from importer.sources.base import Probe, Source, SourceOptions, Transient
from importer.sources.wire import BROKEN, CHUNK, body_chunks
from importer.tls import verify_setting
from importer.urlpolicy import UrlPolicy

MAX_MANIFEST = 4 << 20  # manifests and configs are small JSON; a registry sending more is broken or hostile
MAX_REDIRECTS = 10  # registries on object storage redirect blob GETs to it
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEX_TYPES = MANIFEST_TYPES[0::2]
_ACCEPT = ",".join(MANIFEST_TYPES)
_REDIRECTS = {301, 302, 303, 307, 308}
_REFERENCE = re.compile(r"^docker://(?P<host>[^/]+)/(?P<repo>[^:@]+)"
                        r"(?::(?P<tag>\w[\w.-]*))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")
_DIGEST = re.compile(r"^(?P<alg>sha256|sha512):(?P<hex>[0-9a-f]+)$")
_HEX_LENGTH = {"sha256": 64, "sha512": 128}
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}
_BOOTC_LABELS = ("containers.bootc", "ostree.bootable")
# CDI refuses the value "1"; bootc base images also carry ostree.bootable="true", which is the same claim.
_BOOTC_VALUES = ("1", "true")


@dataclass(frozen=True)
class Reference:
    host: str
    repo: str
    ref: str  # tag or digest


@dataclass(frozen=True)
class Descriptor:
    """What a manifest says about a blob it points to: the blob must be exactly this."""

    digest: str
    size: int | None  # None only for a manifest named by the user's @digest, whose size nobody gave us


def parse_reference(url: str) -> Reference:
    match = _REFERENCE.match(url)
    if not match:
        raise ImportFailed(Reason.InvalidArgument,
                           f"invalid registry URL {url!r}: expected docker://host/repo[:tag|@digest]")
    return Reference(match["host"], match["repo"], match["digest"] or match["tag"] or "latest")


def env_labels(env: list[str]) -> dict[str, str]:
    """Image ENV vars naming KUBEVIRT_IO_ become PVC labels (cdi-facts §2.3)."""
    labels = {}
    for item in env:
        name, _, value = item.partition("=")
        if "KUBEVIRT_IO_" not in name:
            continue
        prefix, _, suffix = name.partition("KUBEVIRT_IO_")
        domain = ".".join(p for p in prefix.split("_") if p)
        key = (f"{domain}." if domain else "") + "kubevirt.io/" + "-".join(p for p in suffix.split("_") if p)
        labels[key.lower()] = value
    return labels


def descriptor(entry: Any, *, what: str) -> Descriptor:
    """A manifest's descriptor, checked: its digest goes into a URL path, so it must be a digest and nothing else."""
    if not isinstance(entry, dict):
        raise ImportFailed(Reason.UnsupportedFormat, f"{what}: not a descriptor")
    digest, size = entry.get("digest"), entry.get("size")
    match = _DIGEST.match(digest) if isinstance(digest, str) else None
    if not match or len(match["hex"]) != _HEX_LENGTH[match["alg"]]:
        raise ImportFailed(Reason.UnsupportedFormat, f"{what}: unsupported digest {digest!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ImportFailed(Reason.UnsupportedFormat, f"{what} {digest}: descriptor without a valid size")
    return Descriptor(digest, size)


class RegistrySource(Source):
    kind = "registry"

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.reference = parse_reference(options.url)
        self.session = requests.Session()
        self.verify = verify_setting(cert_dir=options.cert_dir, insecure=options.insecure)
        if options.insecure:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self.policy = UrlPolicy.from_lists(allow=options.url_allow, deny=options.url_deny)
        self.base = f"https://{self.reference.host}"
        self._token: str | None = None
        self._layers: list[Descriptor] = []
        self._probe: Probe | None = None

    # -- the registry API --------------------------------------------------------------------------

    def _get(self, path: str, *, accept: str = "") -> requests.Response:
        """A 200 response for a registry path, after at most one bearer-token challenge.

        A challenge while holding a token means it expired (they live minutes, a big layer takes longer):
        a fresh one is fetched, once per request.
        """
        response = self._follow(path, accept=accept)
        if response.status_code == 401 and self._authenticate(response):
            response.close()
            response = self._follow(path, accept=accept)
        return self._checked(response, path)

    def _follow(self, path: str, *, accept: str) -> requests.Response:
        """Redirects by hand: every hop passes the URL policy, and credentials only ever go to the registry."""
        url = self.base + path
        for _ in range(MAX_REDIRECTS + 1):
            self.policy.check(url)
            response = self._request(url, accept=accept)
            if response.status_code not in _REDIRECTS or "Location" not in response.headers:
                return response
            response.close()
            url = urljoin(url, response.headers["Location"])
        raise ImportFailed(Reason.RedirectLoop, f"more than {MAX_REDIRECTS} redirects for {self.reference.host}{path}")

    def _request(self, url: str, *, accept: str) -> requests.Response:
        own = url.startswith(self.base + "/")
        # identity: digests are over the bytes as stored, never over a transfer encoding of them
        headers = {"Accept-Encoding": "identity", **({"Accept": accept} if accept else {})}
        auth = None
        if own and self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        elif own and self.options.access_key:
            auth = (self.options.access_key, self.options.secret_key)
        try:
            return self.session.get(url, headers=headers, auth=auth, stream=True, verify=self.verify,
                                    allow_redirects=False,
                                    timeout=(min(30.0, self.options.stall_timeout), self.options.stall_timeout))
        except requests.exceptions.SSLError as error:
            if own and self.options.insecure and self.base.startswith("https://"):
                # An insecure registry may speak plain HTTP (CDI's insecureRegistries): try that once.
                plain = "http://" + url.removeprefix("https://")
                self.base = "http://" + self.reference.host
                return self._request(plain, accept=accept)
            raise ImportFailed(Reason.TLSError, f"TLS with {self.reference.host} failed: {error}") from error
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as error:
            raise Transient(f"cannot reach {self.reference.host}: {error}", unreachable=True) from error

    def _authenticate(self, response: requests.Response) -> bool:
        """The WWW-Authenticate bearer flow; basic auth is simply sent with every request."""
        challenge = response.headers.get("WWW-Authenticate", "")
        if not challenge.lower().startswith("bearer "):
            return False
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", "")
        if not realm:
            return False
        self.policy.check(realm)
        params.setdefault("scope", f"repository:{self.reference.repo}:pull")
        auth = (self.options.access_key, self.options.secret_key) if self.options.access_key else None
        try:
            answer = self.session.get(realm, params=params, auth=auth, verify=self.verify, timeout=30)
        except requests.RequestException as error:
            raise Transient(f"token service {realm} failed: {error}", unreachable=True) from error
        if answer.status_code in (401, 403):
            raise ImportFailed(Reason.Unauthorized,
                               f"{self.reference.host}: token request refused ({answer.status_code})")
        try:
            body = answer.json() if answer.ok else {}
        except ValueError:
            body = {}
        self._token = (body.get("token") or body.get("access_token") or None) if isinstance(body, dict) else None
        return bool(self._token)

    def _checked(self, response: requests.Response, path: str) -> requests.Response:
        code = response.status_code
        if code == 200:
            return response
        response.close()
        where = f"{self.reference.host}{path}"
        if code in (401, 403):
            raise ImportFailed(Reason.Unauthorized, f"{where}: HTTP {code}")
        if code == 404:
            raise ImportFailed(Reason.NotFound, f"{where}: HTTP 404 (no such repository, tag or blob)")
        if code == 429 or code >= 500:
            raise Transient(f"{where}: HTTP {code}")
        raise ImportFailed(Reason.HTTPError, f"{where}: HTTP {code}")

    def _blob(self, path: str, expected: Descriptor | None, *, accept: str = "") -> Iterator[bytes]:
        """The body of ``path``, checked against its descriptor once the last byte is in."""
        response = self._get(path, accept=accept)
        hasher = hashlib.new(expected.digest.split(":", 1)[0]) if expected else None
        limit = expected.size if expected and expected.size is not None else MAX_MANIFEST
        seen = 0
        try:
            for chunk in body_chunks(response):
                self.received += len(chunk)
                seen += len(chunk)
                if seen > limit:
                    if expected and expected.size is not None:
                        raise ImportFailed(Reason.ChecksumMismatch,
                                           f"{path} is longer than the {limit} bytes its descriptor gives")
                    raise ImportFailed(Reason.UnsupportedFormat, f"{path} is larger than {limit} bytes")
                if hasher:
                    hasher.update(chunk)
                yield chunk
        except BROKEN as error:
            raise Transient(f"{self.reference.host}{path} broke: {error}") from error
        finally:
            response.close()
        if expected and hasher and f"{hasher.name}:{hasher.hexdigest()}" != expected.digest:
            raise ImportFailed(Reason.ChecksumMismatch, f"{path} does not match its digest {expected.digest}")

    def _json(self, path: str, expected: Descriptor | None, *, accept: str = "") -> dict[str, Any]:
        body = b"".join(self._blob(path, expected, accept=accept))
        try:
            document = json.loads(body)
        except ValueError as error:
            raise ImportFailed(Reason.UnsupportedFormat, f"{path} is not JSON: {error}") from error
        if not isinstance(document, dict):
            raise ImportFailed(Reason.UnsupportedFormat, f"{path} is not a JSON object")
        return document

    # -- Source ------------------------------------------------------------------------------------

    def probe(self) -> Probe:
        """Manifest (the platform's, from an index), then config: refusals, labels. No layer is read yet.

        Not resumable: the disk file sits inside a layer that is usually compressed, and a gzip or zstd
        stream cannot be entered in the middle, so a broken transfer reads the layer again from its start
        (the pipeline skips what it already has). The file's size is in its tar header, which only
        streaming reaches, so the size is unknown here.
        """
        if self._probe is not None:
            return self._probe
        ref = self.reference
        pinned = Descriptor(ref.ref, None) if ref.ref.startswith("sha256:") else None
        manifest = self._json(f"/v2/{ref.repo}/manifests/{ref.ref}", pinned, accept=_ACCEPT)
        if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
            chosen = self._platform(manifest)
            manifest = self._json(f"/v2/{ref.repo}/manifests/{chosen.digest}", chosen, accept=_ACCEPT)
        if "config" not in manifest:
            raise ImportFailed(Reason.UnsupportedFormat,
                               f"{self.options.url}: unsupported manifest (schemaVersion "
                               f"{manifest.get('schemaVersion')}, mediaType {manifest.get('mediaType')})")
        config_descriptor = descriptor(manifest["config"], what="image config")
        config = self._json(f"/v2/{ref.repo}/blobs/{config_descriptor.digest}", config_descriptor)
        self._check_architecture(config)
        image_config = _mapping(config.get("config"))
        labels = _mapping(image_config.get("Labels"))
        for key in _BOOTC_LABELS:
            if str(labels.get(key, "")).lower() in _BOOTC_VALUES:
                # CDI's wording, so that users searching for it find the same explanation.
                raise ImportFailed(Reason.UnsupportedFormat,
                                   f"bootc image detected: {self.options.url} contains an ostree-based bootable OS "
                                   f"({key}={labels[key]}) and cannot be imported as a regular container disk; "
                                   "bootc-to-disk conversion is not implemented")
        layers = manifest.get("layers")
        if not isinstance(layers, list) or not layers:
            raise ImportFailed(Reason.UnsupportedFormat, f"{self.options.url} has no layers")
        self._layers = [descriptor(layer, what="layer") for layer in layers]
        env = image_config.get("Env")
        self._probe = Probe(size=None, resumable=False,
                            labels=env_labels([str(e) for e in env] if isinstance(env, list) else []))
        return self._probe

    def _architecture(self) -> str:
        return self.options.architecture or _ARCH.get(platform.machine(), platform.machine())

    def _platform(self, index: dict[str, Any]) -> Descriptor:
        arch = self._architecture()
        for entry in index.get("manifests") or []:
            plat = entry.get("platform") if isinstance(entry, dict) else None
            if isinstance(plat, dict) and plat.get("architecture") == arch and plat.get("os", "linux") == "linux":
                return descriptor(entry, what=f"linux/{arch} manifest")
        raise ImportFailed(Reason.NotFound, f"{self.options.url} has no image for linux/{arch}")

    def _check_architecture(self, config: dict[str, Any]) -> None:
        """As CDI: an architecture the user asked for must be the image's, index or not."""
        found = config.get("architecture")
        if self.options.architecture and found and found != self.options.architecture:
            raise ImportFailed(Reason.NotFound,
                               f"{self.options.url}: the image's architecture {found!r} does not match "
                               f"the requested architecture {self.options.architecture!r}")

    def stream(self, offset: int) -> Iterator[bytes]:
        """The disk file, from the top-most layer that has one; the layers below are checked afterwards."""
        self.probe()
        found: str | None = None
        hidden: set[str] = set()  # paths an upper layer whited out or replaced
        opaque: set[str] = set()  # directories an upper layer made opaque
        for layer in reversed(self._layers):
            # What a layer holds hides what the layers *below* hold, so it takes effect once the layer is read.
            layer_hidden: set[str] = set()
            layer_opaque: set[str] = set()
            for name, member, tar in self._members(layer):
                if _is_hidden(name, hidden=hidden, opaque=opaque):
                    continue
                parent, base = posixpath.split(name)
                if base == ".wh..wh..opq":
                    layer_opaque.add(parent)
                    continue
                if base.startswith(".wh."):
                    layer_hidden.add(posixpath.join(parent, base[4:]))
                    continue
                if not member.isdir():
                    layer_hidden.add(name)  # a file, link or device here replaces whatever is below at this path
                if not (name.startswith("disk/") and member.isreg()):
                    continue
                if found is not None:
                    raise ImportFailed(Reason.UnsupportedFormat,
                                       f"{self.options.url} has more than one file under disk/ ({found}, {name}); "
                                       "a containerDisk holds exactly one")
                found = name
                extracted = tar.extractfile(member)
                assert extracted is not None  # a regular file always has a body
                while block := extracted.read(CHUNK):
                    yield block
            hidden |= layer_hidden
            opaque |= layer_opaque
        if found is None:
            raise ImportFailed(Reason.UnsupportedFormat,
                               f"{self.options.url} has no file under disk/: not a containerDisk")

    def _members(self, layer: Descriptor) -> Iterator[tuple[str, tarfile.TarInfo, tarfile.TarFile]]:
        """The layer's tar members with normalised names; the whole blob is read and verified before the end."""
        blob = self._blob(f"/v2/{self.reference.repo}/blobs/{layer.digest}", layer)
        try:
            try:
                _, plain = decompressed(blob)
                with tarfile.open(fileobj=ChunkReader(plain), mode="r|") as tar:  # type: ignore[arg-type]
                    while (member := tar.next()) is not None:
                        tar.members.clear()  # kept for random access we never do: a rootfs layer would cost MBs
                        yield posixpath.normpath(member.name.removeprefix("./").lstrip("/")), member, tar
                for _ in plain:
                    pass  # past the tar's end-of-archive blocks: the compression trailer
            except (ImportFailed, tarfile.TarError) as error:
                if isinstance(error, ImportFailed) and error.reason is Reason.ChecksumMismatch:
                    raise
                # A corrupt blob usually shows first as a bad gzip/zstd/tar stream; its digest names the real cause.
                for _ in blob:
                    pass
                if isinstance(error, ImportFailed):
                    raise
                raise ImportFailed(Reason.UnsupportedFormat,
                                   f"layer {layer.digest[:19]} is not a tar: {error}") from error
            for _ in blob:
                pass  # anything after the compressed stream, so that the digest covers every byte
        finally:
            blob.close()  # the connection, when the caller stops early

    def close(self) -> None:
        self.session.close()


def _mapping(value: object) -> dict[str, Any]:
    """A JSON object where the image config should have one; anything else (absent, null, hostile) counts as empty."""
    return value if isinstance(value, dict) else {}


def _is_hidden(name: str, *, hidden: set[str], opaque: set[str]) -> bool:
    if name in hidden:
        return True
    parent = posixpath.dirname(name)
    while parent:
        if parent in opaque or parent in hidden:
            return True
        parent = posixpath.dirname(parent)
    return False


def open_source(options: SourceOptions) -> Source:
    return RegistrySource(options)
