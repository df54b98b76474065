"""Registry source (pod pull): the KubeVirt containerDisk's one file under ``disk/``, streamed out of its layer.

Nothing is unpacked to disk and no layer is held in memory: the layer blob streams through its digest
check and decompressor into a tar reader, and the disk file's bytes go straight to the pipeline. Layers
are read top-down, so the file that wins under overlay rules is found first; the layers below are then
read only to enforce "exactly one file" and to verify their digests. A violation found after the file
was streamed fails the import, which is then never marked done.
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

import requests

from importer.decompress import ChunkReader, decompressed
from importer.errors import ImportFailed, Reason
from importer.sources.base import Probe, Source, SourceOptions, Transient
from importer.tls import verify_setting
from importer.urlpolicy import UrlPolicy

CHUNK = 1 << 20
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEX_TYPES = MANIFEST_TYPES[0::2]
_REFERENCE = re.compile(r"^docker://(?P<host>[^/]+)/(?P<repo>[^:@]+(?:/[^:@]+)*)(?::(?P<tag>[\w][\w.-]*))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}
_BOOTC_LABELS = (("containers.bootc", "1"), ("ostree.bootable", "1"))


@dataclass(frozen=True)
class Reference:
    host: str
    repo: str
    ref: str  # tag or digest


def parse_reference(url: str) -> Reference:
    match = _REFERENCE.match(url)
    if not match:
        raise ImportFailed(Reason.InvalidArgument, f"invalid registry URL {url!r}: expected docker://host/repo[:tag|@digest]")
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


class RegistrySource(Source):
    kind = "registry"

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.reference = parse_reference(options.url)
        self.session = requests.Session()
        self.verify = verify_setting(cert_dir=options.cert_dir, insecure=options.insecure)
        self.policy = UrlPolicy.from_lists(allow=options.url_allow, deny=options.url_deny)
        self.base = f"https://{self.reference.host}"
        self._token: str | None = None
        self._layers: list[dict] = []
        self._probe: Probe | None = None

    # -- the registry API --------------------------------------------------------------------------

    def _get(self, path: str, *, accept: str = "", stream: bool = False) -> requests.Response:
        url = self.base + path
        self.policy.check(url)
        for _ in range(2):
            headers = {"Accept": accept} if accept else {}
            if self._token:
                headers["Authorization"] = f"Bearer {self._token}"
            auth = (self.options.access_key, self.options.secret_key) if self.options.access_key and not self._token else None
            try:
                response = self.session.get(url, headers=headers, auth=auth, stream=stream, verify=self.verify,
                                            timeout=(min(30.0, self.options.stall_timeout), self.options.stall_timeout))
            except requests.exceptions.SSLError as error:
                if self.options.insecure and self.base.startswith("https://"):
                    self.base = "http://" + self.reference.host  # an insecure registry may speak plain HTTP
                    return self._get(path, accept=accept, stream=stream)
                raise ImportFailed(Reason.TLSError, f"TLS with {self.reference.host} failed: {error}") from error
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as error:
                raise Transient(f"cannot reach {self.reference.host}: {error}", unreachable=True) from error
            if response.status_code == 401 and self._token is None and self._authenticate(response):
                continue
            return self._checked(response, path)
        return self._checked(response, path)

    def _authenticate(self, response: requests.Response) -> bool:
        """The WWW-Authenticate bearer flow; basic auth is simply sent with the next try."""
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
            raise ImportFailed(Reason.Unauthorized, f"{self.reference.host}: token request refused ({answer.status_code})")
        body = answer.json() if answer.ok else {}
        self._token = body.get("token") or body.get("access_token")
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
        if code in (429,) or code >= 500:
            raise Transient(f"{where}: HTTP {code}")
        raise ImportFailed(Reason.HTTPError, f"{where}: HTTP {code}")

    def _json(self, path: str, *, accept: str = "", digest: str | None = None) -> tuple[dict, str]:
        response = self._get(path, accept=accept)
        body = response.content
        if digest and "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise ImportFailed(Reason.ChecksumMismatch, f"{path} does not match its digest {digest}")
        return json.loads(body), response.headers.get("Content-Type", "")

    # -- Source ------------------------------------------------------------------------------------

    def probe(self) -> Probe:
        if self._probe is not None:
            return self._probe
        ref = self.reference
        pinned = ref.ref if ref.ref.startswith("sha256:") else None
        manifest, media = self._json(f"/v2/{ref.repo}/manifests/{ref.ref}", accept=",".join(MANIFEST_TYPES),
                                     digest=pinned)
        if media in INDEX_TYPES or manifest.get("manifests"):
            chosen = self._platform(manifest)
            manifest, media = self._json(f"/v2/{ref.repo}/manifests/{chosen}", accept=",".join(MANIFEST_TYPES),
                                         digest=chosen)
        config, _ = self._json(f"/v2/{ref.repo}/blobs/{manifest['config']['digest']}",
                               digest=manifest["config"]["digest"])
        image_config = config.get("config") or {}
        labels = image_config.get("Labels") or {}
        for key, value in _BOOTC_LABELS:
            if str(labels.get(key, "")) == value:
                raise ImportFailed(Reason.UnsupportedFormat,
                                   f"{self.options.url} is a bootc/ostree image ({key}={value}), not a containerDisk")
        self._layers = list(manifest.get("layers") or [])
        if not self._layers:
            raise ImportFailed(Reason.UnsupportedFormat, f"{self.options.url} has no layers")
        self._probe = Probe(size=None, resumable=False, labels=env_labels(image_config.get("Env") or []))
        return self._probe

    def _platform(self, index: dict) -> str:
        arch = self.options.architecture or _ARCH.get(platform.machine(), platform.machine())
        for entry in index.get("manifests", []):
            plat = entry.get("platform") or {}
            if plat.get("architecture") == arch and plat.get("os", "linux") == "linux":
                return str(entry["digest"])
        raise ImportFailed(Reason.NotFound, f"{self.options.url} has no image for linux/{arch}")

    def stream(self, offset: int) -> Iterator[bytes]:
        """The disk file, from the top-most layer that has one; the layers below are checked afterwards."""
        self.probe()
        found: str | None = None
        hidden: set[str] = set()  # paths whited out by an upper layer
        opaque: set[str] = set()  # directories made opaque by an upper layer
        for layer in reversed(self._layers):
            # Whiteouts hide what the layers *below* hold, so they take effect once this layer is read.
            layer_hidden: set[str] = set()
            layer_opaque: set[str] = set()
            for name, member, tar in self._members(layer):
                if _is_hidden(name, hidden=hidden, opaque=opaque):
                    continue
                base = posixpath.basename(name)
                if base == ".wh..wh..opq":
                    layer_opaque.add(posixpath.dirname(name))
                    continue
                if base.startswith(".wh."):
                    layer_hidden.add(posixpath.join(posixpath.dirname(name), base[4:]))
                    continue
                if not (name.startswith("disk/") and member.isreg()):
                    continue
                if found is not None:
                    raise ImportFailed(Reason.UnsupportedFormat,
                                       f"{self.options.url} has more than one file under disk/ ({found}, {name})")
                found = name
                extracted = tar.extractfile(member)
                assert extracted is not None
                while block := extracted.read(CHUNK):
                    yield block
                layer_hidden.add(name)  # a lower layer's file at the same path is replaced, not a second file
            hidden |= layer_hidden
            opaque |= layer_opaque
        if found is None:
            raise ImportFailed(Reason.UnsupportedFormat, f"{self.options.url} has no file under disk/")

    def _members(self, layer: dict) -> Iterator[tuple[str, tarfile.TarInfo, tarfile.TarFile]]:
        digest = str(layer["digest"])
        response = self._get(f"/v2/{self.reference.repo}/blobs/{digest}", stream=True)
        hasher = hashlib.sha256()

        def blob() -> Iterator[bytes]:
            try:
                for chunk in response.raw.stream(CHUNK, decode_content=False):
                    self.received += len(chunk)
                    hasher.update(chunk)
                    yield chunk
            except (requests.RequestException, OSError) as error:
                raise Transient(f"layer {digest[:19]} broke: {error}") from error

        _, plain = decompressed(blob())
        try:
            with tarfile.open(fileobj=ChunkReader(plain), mode="r|") as tar:  # type: ignore[arg-type]
                for member in tar:
                    name = posixpath.normpath(member.name.removeprefix("./").lstrip("/"))
                    yield name, member, tar
            for _ in plain:
                pass  # the rest of the blob (tar end padding), so the digest covers all of it
        except tarfile.TarError as error:
            raise ImportFailed(Reason.UnsupportedFormat, f"layer {digest[:19]} is not a tar: {error}") from error
        finally:
            response.close()
        if "sha256:" + hasher.hexdigest() != digest:
            raise ImportFailed(Reason.ChecksumMismatch, f"layer {digest} does not match its digest")

    def close(self) -> None:
        self.session.close()


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
