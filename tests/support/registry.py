"""A real OCI registry for tests (Debian's docker-registry) and images built by the test, pushed with the v2 API."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import requests
import zstandard

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_GZIP_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
LAYER_TYPES = {"gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
               "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
               "none": "application/vnd.oci.image.layer.v1.tar"}


def layer_tar(files: dict[str, bytes | None]) -> bytes:
    """A layer: path → content (None: a directory). Paths under disk/ follow the containerDisk convention."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in files.items():
            info = tarfile.TarInfo(path)
            info.uid = info.gid = 107
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o555
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o440
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def compress(data: bytes, how: str) -> bytes:
    if how == "gzip":
        return gzip.compress(data, compresslevel=1, mtime=0)
    if how == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return data


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Bearer(requests.auth.AuthBase):
    """Pushes to a token-auth registry: asks the token service for each scope the registry challenges for."""

    def __init__(self, credentials: tuple[str, str]) -> None:
        self.credentials = credentials

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.register_hook("response", self._retry_with_token)
        return request

    def _retry_with_token(self, response: requests.Response, **kwargs: object) -> requests.Response:
        challenge = response.headers.get("WWW-Authenticate", "")
        if response.status_code != 401 or not challenge.startswith("Bearer "):
            return response
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm")
        token = requests.get(realm, params=params, auth=self.credentials, timeout=10).json()["token"]
        retry = response.request.copy()
        retry.headers["Authorization"] = f"Bearer {token}"
        retry.deregister_hook("response", self._retry_with_token)
        return response.connection.send(retry, **kwargs)  # type: ignore[arg-type]


class Registry:
    def __init__(self, workdir: Path, *, htpasswd: tuple[str, str] | None = None,
                 token: tuple[str, str, str] | None = None, tls: tuple[Path, Path, Path] | None = None) -> None:
        """``htpasswd``: (user, password) for basic auth; ``token``: (realm, issuer cert path, user:password) for
        the bearer flow against a :class:`tests.support.tokenserver.TokenServer`; ``tls``: (certificate, key, CA)
        to serve HTTPS."""
        binary = shutil.which("docker-registry")
        if binary is None:
            pytest.skip("docker-registry is not installed")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.storage = workdir / "data"
        self.auth = htpasswd
        config = {"version": 0.1, "log": {"level": "warn", "accesslog": {"disabled": True}},
                  "storage": {"filesystem": {"rootdirectory": str(self.storage)}, "delete": {"enabled": True}},
                  "http": {"addr": f"127.0.0.1:{self.port}"}}
        self.scheme, self.verify = "http", True
        if tls:
            config["http"]["tls"] = {"certificate": str(tls[0]), "key": str(tls[1])}
            self.scheme, self.verify = "https", str(tls[2])
        if htpasswd:
            line = subprocess.run(["htpasswd", "-Bbn", *htpasswd], capture_output=True, text=True, check=True).stdout
            (workdir / "htpasswd").write_text(line)
            config["auth"] = {"htpasswd": {"realm": "test-registry", "path": str(workdir / "htpasswd")}}
        if token:
            realm, cert, credentials = token
            user, _, password = credentials.partition(":")
            config["auth"] = {"token": {"realm": realm, "service": "test-registry",
                                        "issuer": "kubecdi-test-token-service", "rootcertbundle": cert}}
            self.auth = _Bearer((user, password))  # type: ignore[assignment]
        (workdir / "config.yml").write_text(json.dumps(config))
        self.log = (workdir / "registry.log").open("wb")
        self.process = subprocess.Popen([binary, "serve", str(workdir / "config.yml")], stdout=self.log,
                                        stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{self.base}/v2/", timeout=2, verify=self.verify).status_code in (200, 401):
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("docker-registry did not start")
            time.sleep(0.1)

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def url(self, repo: str, ref: str) -> str:
        separator = "@" if ref.startswith("sha256:") else ":"
        return f"docker://127.0.0.1:{self.port}/{repo}{separator}{ref}"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.log.close()

    def _blob(self, repo: str, data: bytes) -> str:
        d = digest(data)
        start = requests.post(f"{self.base}/v2/{repo}/blobs/uploads/", auth=self.auth, timeout=30, verify=self.verify)
        start.raise_for_status()
        location = start.headers["Location"]
        location = location if location.startswith("http") else self.base + location
        separator = "&" if "?" in location else "?"
        put = requests.put(f"{location}{separator}digest={d}", data=data, auth=self.auth, timeout=60, verify=self.verify,
                           headers={"Content-Type": "application/octet-stream"})
        put.raise_for_status()
        return d

    def push_manifest(self, repo: str, ref: str, body: dict, media: str) -> str:
        data = json.dumps(body).encode()
        requests.put(f"{self.base}/v2/{repo}/manifests/{ref}", data=data, auth=self.auth, timeout=30, verify=self.verify,
                     headers={"Content-Type": media}).raise_for_status()
        return digest(data)

    def push_image(self, repo: str, tag: str, layers: list[tuple[dict[str, bytes | None], str]], *,
                   arch: str = "amd64", env: list[str] | None = None, labels: dict[str, str] | None = None,
                   docker: bool = False) -> str:
        """An OCI image, or with ``docker`` a Docker v2 schema 2 one (gzip layers only, as Docker writes)."""
        descriptors, diff_ids = [], []
        for files, how in layers:
            tar = layer_tar(files)
            blob = compress(tar, how)
            media = DOCKER_GZIP_LAYER if docker else LAYER_TYPES[how]
            descriptors.append({"mediaType": media, "digest": self._blob(repo, blob), "size": len(blob)})
            diff_ids.append(digest(tar))
        config = json.dumps({"architecture": arch, "os": "linux",
                             "config": {"Env": env or [], "Labels": labels or {}},
                             "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
        media = DOCKER_MANIFEST if docker else OCI_MANIFEST
        manifest = {"schemaVersion": 2, "mediaType": media,
                    "config": {"mediaType": DOCKER_CONFIG if docker else "application/vnd.oci.image.config.v1+json",
                               "digest": self._blob(repo, config), "size": len(config)},
                    "layers": descriptors}
        return self.push_manifest(repo, tag, manifest, media)

    def push_index(self, repo: str, tag: str, children: dict[str, str], *, docker: bool = False) -> str:
        """children: architecture → manifest digest (already pushed in the repo); ``docker``: a manifest list."""
        child_type, index_type = (DOCKER_MANIFEST, DOCKER_LIST) if docker else (OCI_MANIFEST, OCI_INDEX)
        manifests = []
        for arch, child in children.items():
            raw = requests.get(f"{self.base}/v2/{repo}/manifests/{child}", auth=self.auth, timeout=30,
                               headers={"Accept": child_type}, verify=self.verify).content
            manifests.append({"mediaType": child_type, "digest": child, "size": len(raw),
                              "platform": {"architecture": arch, "os": "linux"}})
        return self.push_manifest(repo, tag, {"schemaVersion": 2, "mediaType": index_type, "manifests": manifests},
                                  index_type)

    def blob_path(self, blob_digest: str) -> Path:
        hexdigest = blob_digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
