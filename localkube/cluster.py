"""A whole local cluster: the API server, the storage provisioner and the kubelet on one event loop in a
background thread, with a Node `localkube` and two StorageClasses, `local` (Immediate, the default) and
`local-wffc` (WaitForFirstConsumer).

    with Cluster(workdir, images=console_script_images("cdi-importer")) as cluster:
        cluster.kubeconfig, cluster.url

`stop()` stops every pod process, unmounts every mount and detaches every loop device the cluster made, also
after errors; volume files and pod logs go too (the objects lived in memory), the kubeconfig stays.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from .apiserver import APIServer
from .client import Client, path
from .kubeconfig import write_kubeconfig
from .kubelet import ImageMap, Kubelet
from .storage import PROVISIONER, Provisioner, host_capabilities_missing
from .storage.hostvolumes import release_leftovers

T = TypeVar("T")

STORAGE_CLASSES = {"local": "Immediate", "local-wffc": "WaitForFirstConsumer"}
DEFAULT_CLASS = "local"


class ClusterUnavailable(RuntimeError):
    """This machine lacks what a local cluster needs (root, loop devices, mount namespaces)."""


class Cluster:
    def __init__(self, workdir: Path, *, port: int = 0, images: ImageMap | None = None,
                 kubeconfig: Path | None = None, backoff_base: float = 10.0, backoff_cap: float = 300.0,
                 shutdown_grace: float = 5.0) -> None:
        self.workdir = Path(workdir).resolve()
        self.kubeconfig = kubeconfig or self.workdir / "kubeconfig"
        self._port = port
        self._images = dict(images or {})
        self._kubelet_options = {"backoff_base": backoff_base, "backoff_cap": backoff_cap,
                                 "shutdown_grace": shutdown_grace}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.server: APIServer | None = None
        self.client: Client | None = None
        self.kubelet: Kubelet | None = None
        self.provisioner: Provisioner | None = None

    @property
    def url(self) -> str:
        assert self.server is not None, "the cluster is not started"
        return self.server.url

    def call(self, awaitable: Awaitable[T], timeout: float = 60) -> T:
        """Runs a coroutine on the cluster's loop (tests read the kubelet's or store's state there)."""
        assert self._loop is not None, "the cluster is not started"
        return asyncio.run_coroutine_threadsafe(awaitable, self._loop).result(timeout)  # type: ignore[arg-type]

    def start(self) -> Cluster:
        missing = host_capabilities_missing()
        if missing:
            raise ClusterUnavailable(missing)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="localkube-cluster", daemon=True)
        self._thread.start()
        try:
            self.call(self._start())
        except BaseException:
            self.stop()
            raise
        return self

    async def _start(self) -> None:
        self.server = APIServer(port=self._port)
        await self.server.start()
        self.client = Client(self.server.url)
        for name, mode in STORAGE_CLASSES.items():
            annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if name == DEFAULT_CLASS else {}
            await self.client.create_or_keep(path("storageclasses", group="storage.k8s.io"), {
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": name, "annotations": annotations},
                "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": mode})
        self.provisioner = Provisioner(self.client, self.workdir / "volumes")
        self.kubelet = Kubelet(self.client, self.workdir, images=self._images, **self._kubelet_options)
        self.server.log_provider = self.kubelet.logs
        synced = [asyncio.Event(), asyncio.Event()]
        self._tasks = [self._supervised(self.provisioner.run(synced[0])),
                       self._supervised(self.kubelet.run(synced[1]))]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in synced)), 30)
        write_kubeconfig(self.kubeconfig, server_url=self.server.url)

    def _supervised(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        task.add_done_callback(_report_crash)
        return task

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            if self._loop.is_running():
                self.call(self._stop(), timeout=120)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=30)
            self._loop.close()
            self._loop = None

    async def _stop(self) -> None:
        """Pods first (their mount namespaces hold the volumes), then volumes, then the API."""
        try:
            if self.kubelet is not None:
                await self.kubelet.shutdown()
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            try:
                if self.provisioner is not None:
                    await self.provisioner.shutdown()
            finally:
                await release_leftovers(self.workdir / "volumes")
                if self.client is not None:
                    await self.client.close()
                if self.server is not None:
                    await self.server.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger(__name__).error("localkube component stopped", exc_info=task.exception())
