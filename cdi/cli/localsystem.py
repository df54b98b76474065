"""The system `cdi local` serves and the end-to-end tests use: localkube, our CRDs, the controller with its
admission webhook, the upload proxy and token API.

Images are never pulled: `*/cdi-importer` and `*/cdi-uploadserver` run this installation's console scripts
(localkube.kubelet.images). The controller runs as a child process so that it can be killed and restarted
like a real one. Stopping removes every pod process, mount and loop device the cluster made.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests
import yaml

from cdi.api import names
from cdi.cli.localupload import UploadPlane
from localkube.cluster import Cluster
from localkube.kubelet import console_script_images

# The repository's crds/ (cdi local runs from a clone of it; a real cluster gets them from deploy/).
CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
IMPORTER_IMAGE = "kubecdi/cdi-importer:local"
# Before the controller's and the upload proxy's command: from their start, they are killed when the thread
# that started them ends, however it ends. Without it a `cdi local` killed with SIGKILL left them running; an
# orphaned controller kept reconnecting to its old API port and could serve whatever cluster bound that port
# next, unauthenticated. (util-linux's setpriv sets the signal and execs: the process keeps its pid.)
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL", "--")
WEBHOOK_NAME = "datavolume-validate.cdi.kubevirt.io"


class NotReady(RuntimeError):
    """A part of the local system did not come up; the message says which and where its log is."""


class LocalCDI:
    """localkube plus kubecdi's control plane. ``with LocalCDI(workdir) as cdi: cdi.kubeconfig, cdi.url``"""

    def __init__(self, workdir: Path, *, port: int = 0, kubeconfig: Path | None = None,
                 backoff_base: float = 10.0, backoff_cap: float = 300.0, shutdown_grace: float = 5.0,
                 controller_env: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir).resolve()
        self.cluster = Cluster(self.workdir / "cluster", port=port, kubeconfig=kubeconfig,
                               images=console_script_images("cdi-importer", "cdi-uploadserver"),
                               backoff_base=backoff_base, backoff_cap=backoff_cap, shutdown_grace=shutdown_grace)
        self.controller_env = dict(controller_env or {})
        self.controller: subprocess.Popen[bytes] | None = None
        self.controller_log = self.workdir / "controller.log"
        self.upload = UploadPlane(self.workdir)  # the upload proxy and the UploadTokenRequest API

    @property
    def kubeconfig(self) -> Path:
        return self.cluster.kubeconfig

    @property
    def url(self) -> str:
        return self.cluster.url

    def start(self) -> LocalCDI:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cluster.start()
        try:
            install_crds(self.url)
            self.upload.start(api_url=self.url, kubeconfig=self.kubeconfig)
            self.start_controller()
        except BaseException:
            self.stop()
            raise
        return self

    def start_controller(self, *, timeout: float = 60) -> None:
        """Starts the controller and returns once it has published its config and webhook."""
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), names.ENV_IMPORTER_IMAGE: IMPORTER_IMAGE,
               names.ENV_PULL_POLICY: "IfNotPresent", names.ENV_WEBHOOK_HOST: "127.0.0.1",
               names.ENV_WEBHOOK_PORT: str(free_port()),
               **self.upload.controller_env(), **self.controller_env}
        with self.controller_log.open("ab") as log:
            self.controller = subprocess.Popen([*DIE_WITH_PARENT, sys.executable, "-m", "cdi.controller"], env=env,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        webhooks = f"{self.url}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
        config = f"{self.url}/apis/{names.GROUP}/{names.VERSION}/{names.CDICONFIGS}/{names.CDICONFIG_NAME}"
        while time.monotonic() < deadline:
            if self.controller is not None and self.controller.poll() is not None:
                raise NotReady(f"the controller exited with {self.controller.returncode}; see {self.controller_log}")
            configured = requests.get(config, timeout=5)
            hooks = requests.get(webhooks, timeout=5).json().get("items") or []
            missing = [what for what, there in (
                ("CDIConfig status", configured.ok and (configured.json().get("status") or {}).get("filesystemOverhead")),
                ("the DataVolume webhook", any(w.get("name") == WEBHOOK_NAME for h in hooks for w in h.get("webhooks") or [])),
            ) if not there]
            if not missing:
                return
            time.sleep(0.2)
        raise NotReady(f"the controller did not publish {' and '.join(missing)} within {timeout:.0f} s; "
                       f"see {self.controller_log}")

    def stop_controller(self, *, kill: bool = False) -> None:
        """Stops the controller (SIGKILL with ``kill``, as a crash would); the cluster keeps running."""
        process, self.controller = self.controller, None
        stop_process(process, kill=kill)

    def stop(self) -> None:
        try:
            self.stop_controller()
        finally:
            try:
                self.upload.stop()
            finally:
                self.cluster.stop()

    def __enter__(self) -> LocalCDI:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def crd_documents() -> dict[str, dict]:
    """The CustomResourceDefinitions of crds/ by file name (its kustomization.yaml is not one)."""
    documents = {p.name: yaml.safe_load(p.read_text()) for p in sorted(CRD_DIR.glob("*.yaml"))}
    return {name: d for name, d in documents.items() if d.get("kind") == "CustomResourceDefinition"}


def install_crds(url: str, *, timeout: float = 30) -> None:
    """Creates (or keeps) every CRD of crds/ and waits until each serves its resource."""
    crds = list(crd_documents().values())
    if not crds:
        raise NotReady(f"no CRDs in {CRD_DIR}: cdi local runs from a clone of the repository")
    base = f"{url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        response = requests.post(base, json=crd, timeout=10)
        if response.status_code != 409:
            response.raise_for_status()
    deadline = time.monotonic() + timeout
    for crd in crds:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        version = crd["spec"]["versions"][0]["name"]
        while requests.get(f"{url}/apis/{group}/{version}/{plural}", timeout=5).status_code != 200:
            if time.monotonic() > deadline:
                raise NotReady(f"CRD {plural}.{group} is not served")
            time.sleep(0.1)


def stop_process(process: subprocess.Popen[bytes] | None, *, kill: bool = False, timeout: float = 30) -> None:
    """SIGTERM (SIGKILL with ``kill``) a child process that may have exited, and wait for it."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
