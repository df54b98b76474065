"""The upload side of `cdi local`: keys and certificates as CDI's operator makes them, `cdi-uploadproxy` as a
child process (it also serves the UploadTokenRequest API), and the APIService that makes localkube forward
``upload.cdi.kubevirt.io/v1beta1`` to it.

Files under WORKDIR/upload/: ``signing.key`` (RSA, signs upload tokens), ``server-ca.{crt,key}`` (signs each
upload server's certificate; the controller holds it), ``client-ca.crt`` (upload servers accept clients it
signed), ``proxy-client/`` (the proxy's client certificate, CN ``client.upload-server.cdi.kubevirt.io``),
``proxy-server/`` and ``proxy-ca.crt`` (the proxy's serving certificate for 127.0.0.1 and its CA).
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path

import requests
from cryptography.hazmat.primitives import serialization

from cdi.api import names
from cdi.controller import certs
from uploadproxy import contract as uc
from uploadproxy import token

HOST = "127.0.0.1"
UPLOADSERVER_IMAGE = "kubecdi/cdi-uploadserver:local"


class UploadPlane:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "upload"
        self.log = workdir / "uploadproxy.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = self.api_port = 0

    @property
    def url(self) -> str:
        """The upload proxy's URL, as CDIConfig ``status.uploadProxyURL`` publishes it."""
        return f"https://{HOST}:{self.port}"

    @property
    def signing_key(self) -> Path:
        """The RSA key the token API signs upload tokens with (PEM); the proxy verifies with its public half."""
        return self.dir / "signing.key"

    @property
    def proxy_ca(self) -> Path:
        """The CA of the proxy's serving certificate (clients trust it, or use --insecure)."""
        return self.dir / "proxy-ca.crt"

    def controller_env(self) -> dict[str, str]:
        return {names.ENV_UPLOADSERVER_IMAGE: UPLOADSERVER_IMAGE, names.ENV_UPLOADPROXY_URL: self.url,
                names.ENV_UPLOAD_SERVER_CA_CERT: str(self.dir / "server-ca.crt"),
                names.ENV_UPLOAD_SERVER_CA_KEY: str(self.dir / "server-ca.key"),
                names.ENV_UPLOAD_CLIENT_CA: str(self.dir / "client-ca.crt")}

    def _write_pki(self) -> None:
        if self.signing_key.exists():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        key = token.generate_key()
        server_ca, client_ca, proxy_ca = (certs.new_ca(f"kubecdi local {what}")
                                          for what in ("upload server signer", "upload client signer",
                                                       "upload proxy CA"))
        files = {
            "server-ca.crt": server_ca.cert_pem, "server-ca.key": server_ca.key_pem,
            "client-ca.crt": client_ca.cert_pem, "proxy-ca.crt": proxy_ca.cert_pem,
        }
        for folder, pair in (("proxy-client", certs.issue(client_ca, common_name=uc.UPLOAD_CLIENT_NAME, server=False)),
                             ("proxy-server", certs.issue(proxy_ca, common_name=HOST, server=True,
                                                          hosts=[HOST, "localhost"]))):
            files[f"{folder}/tls.crt"], files[f"{folder}/tls.key"] = pair.cert_pem, pair.key_pem
        files[self.signing_key.name] = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        for name, data in files.items():
            path = self.dir / name
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(data)
            if name.endswith(".key"):
                path.chmod(0o600)

    def start(self, *, api_url: str, kubeconfig: Path, timeout: float = 30) -> None:
        """Starts the proxy and token API, registers the APIService, and returns once both answer."""
        from cdi.cli.localsystem import DIE_WITH_PARENT, free_port  # noqa: PLC0415 - one place for both

        self._write_pki()
        self.port, self.api_port = free_port(), free_port()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*DIE_WITH_PARENT, sys.executable, "-m", "uploadproxy.proxy",
                 "--listen-address", HOST, "--port", str(self.port),
                 "--server-cert-dir", str(self.dir / "proxy-server"), "--client-cert-dir", str(self.dir / "proxy-client"),
                 "--upload-server-ca", str(self.dir / "server-ca.crt"), "--token-api-port", str(self.api_port),
                 "--token-signing-key", str(self.signing_key)],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._register(api_url)
        self._wait_ready(api_url, timeout)

    def _register(self, api_url: str) -> None:
        body = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": names.UPLOAD_APISERVICE,
                             "annotations": {"localkube.dev/url": f"https://{HOST}:{self.api_port}"}},
                "spec": {"group": names.UPLOAD_GROUP, "version": names.VERSION, "groupPriorityMinimum": 1000,
                         "versionPriority": 15, "caBundle": base64.b64encode(self.proxy_ca.read_bytes()).decode()}}
        base = f"{api_url}/apis/apiregistration.k8s.io/v1/apiservices"
        response = requests.post(base, json=body, timeout=10)
        if response.status_code == 409:  # a restart of the proxy on new ports
            current = requests.get(f"{base}/{names.UPLOAD_APISERVICE}", timeout=10).json()
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            response = requests.put(f"{base}/{names.UPLOAD_APISERVICE}", json=body, timeout=10)
        response.raise_for_status()

    def _wait_ready(self, api_url: str, timeout: float) -> None:
        from cdi.cli.localsystem import NotReady  # noqa: PLC0415

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise NotReady(f"the upload proxy exited with {self.process.returncode}; see {self.log}")
            try:
                healthy = requests.get(f"{self.url}{uc.HEALTHZ}", verify=str(self.proxy_ca), timeout=5).ok
                served = requests.get(f"{api_url}/apis/{names.UPLOAD_GROUP}/{names.VERSION}", timeout=5).ok
            except requests.RequestException:
                healthy = served = False
            if healthy and served:
                return
            time.sleep(0.2)
        raise NotReady(f"the upload proxy did not answer within {timeout:.0f} s; see {self.log}")

    def stop(self) -> None:
        from cdi.cli.localsystem import stop_process  # noqa: PLC0415

        process, self.process = self.process, None
        stop_process(process, timeout=15)
