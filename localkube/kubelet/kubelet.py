"""The node agent: registers the Node, schedules pods onto it and runs them (see pod.py), serves their logs.

It is a client of the HTTP API like the real kubelet and scheduler: it watches pods and claims, binds a pod
through `pods/binding` once every claim it uses is Bound (first asking for WaitForFirstConsumer claims by
setting `volume.kubernetes.io/selected-node`), and writes pod status through `pods/status`. A pod deleted
from the API (by a user or the garbage collector) gets SIGTERM, then SIGKILL after its grace period; a pod
given a deletionTimestamp (it has finalizers) is stopped the same way and then deleted with grace 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import random
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

from ..apiserver.errors import APIError as ServedError
from ..client import APIError, Client, Object, path, post_event
from . import podspec
from .images import ImageMap
from .pod import Container, PodWorker
from .spawner import Spawner

log = logging.getLogger(__name__)

NODE_NAME = "localkube"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
CLAIM_RECHECK = 10.0  # seconds: a pod waiting for its claims looks again when one changes, or after this long
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


class Kubelet:
    def __init__(self, client: Client, workdir: Path, *, images: ImageMap, backoff_base: float = 10.0,
                 backoff_cap: float = 300.0, shutdown_grace: float = 5.0) -> None:
        self.client = client
        self.workdir = workdir
        self.images = images
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.shutdown_grace = shutdown_grace
        self.host_ip = "127.0.0.1"
        self.workers: dict[str, PodWorker] = {}
        self._closed = False  # set by shutdown: no new pods start, whatever the watch still delivers
        self.spawner = Spawner()
        self._stopping: set[asyncio.Task[None]] = set()
        # Per claim, so that a change wakes only the pods waiting for that claim: with every waiting pod woken
        # by every claim's change, 200 pods waiting on a busy provisioner made 100,000 requests.
        self._claim_changed: dict[tuple[str, str], asyncio.Event] = {}
        # The claims as the watch last delivered them: a pod's claim, Bound before the pod was made, is not asked
        # for again on the way to its start (each request here is one more for the loop the API server runs on).
        self.claims: dict[tuple[str, str], Object] = {}
        # Pod IPs are 127.N.x.y with N random per kubelet, so two clusters on one machine rarely collide.
        self._subnet = random.randint(1, 254)
        self._next_ip = 0

    async def run(self, synced: asyncio.Event | None = None) -> None:
        # Pod directories left by a run that did not stop cleanly hold nothing mounted (mounts live in the
        # pods' own namespaces), so they simply go.
        shutil.rmtree(self.workdir / "pods", ignore_errors=True)
        await self._register_node()
        claims = asyncio.create_task(self.client.inform(path("persistentvolumeclaims"), self._on_claim))
        try:
            await self.client.inform(path("pods"), self._on_pod, synced=synced)
        finally:
            claims.cancel()

    async def shutdown(self) -> None:
        """Stops every pod (grace capped at shutdown_grace) and waits for pods already being stopped."""
        self._closed = True
        workers, self.workers = list(self.workers.values()), {}
        await asyncio.gather(*(w.stop(min(_grace(w.pod), self.shutdown_grace)) for w in workers),
                             *self._stopping, return_exceptions=True)
        await self.spawner.close()

    def allocate_ip(self) -> str:
        self._next_ip += 1
        return f"127.{self._subnet}.{self._next_ip // 250}.{self._next_ip % 250 + 1}"

    def fetch(self, namespace: str) -> podspec.Fetch:
        async def get(resource: str, name: str) -> Object | None:
            return await self.client.get_or_none(path(resource, namespace=namespace, name=name))
        return get

    # -- node and scheduling ----------------------------------------------------------------------------------

    async def _register_node(self) -> None:
        arch = _ARCH.get(platform.machine(), platform.machine())
        capacity = {"cpu": str(os.cpu_count() or 1), "memory": f"{_memory_kib()}Ki", "pods": "110"}
        status = {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "localkube kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": self.host_ip}, {"type": "Hostname", "address": NODE_NAME}],
            "nodeInfo": {"architecture": arch, "operatingSystem": "linux", "kubeletVersion": "v1.37.0-localkube",
                         "containerRuntimeVersion": "localkube://processes", "osImage": platform.platform(),
                         "kernelVersion": platform.release(), "kubeProxyVersion": "", "machineID": "",
                         "systemUUID": "", "bootID": ""},
        }
        await self.client.create_or_keep(path("nodes"), {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                                                       "kubernetes.io/arch": arch}},
            "spec": {}, "status": status})
        await self.client.patch(path("nodes", name=NODE_NAME, subresource="status"), {"status": status})

    async def _on_claim(self, kind: str, pvc: Object) -> None:
        key = (pvc["metadata"]["namespace"], pvc["metadata"]["name"])
        if kind == "DELETED":
            self.claims.pop(key, None)
        else:
            self.claims[key] = pvc
        changed = self._claim_changed.pop(key, None)
        if changed is not None:
            changed.set()

    async def schedule(self, worker: PodWorker) -> bool:
        """Waits until the pod's claims are Bound, then binds the pod to this node; False if the pod was deleted
        first (a garbage-collected dependent, say)."""
        while not worker.pod["spec"].get("nodeName"):
            # Taken before looking, so that a change while we look is not missed.
            changes = [self._claim_changed.setdefault((worker.namespace, volume["persistentVolumeClaim"]["claimName"]),
                                                      asyncio.Event())
                       for volume in worker.pod["spec"].get("volumes", []) if "persistentVolumeClaim" in volume]
            problem = await self._unbound_claim(worker.pod)
            if problem is None:
                binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": worker.name},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME}}
                try:
                    await self.client.create(path("pods", namespace=worker.namespace, name=worker.name,
                                                  subresource="binding"), binding)
                except APIError as exc:
                    if exc.code == 404:
                        return False
                    if exc.code != 409:  # bound already, by anyone
                        raise
                    current = await self.client.get_or_none(path("pods", namespace=worker.namespace,
                                                                 name=worker.name))
                    if current is None:
                        return False
                    worker.pod = current
                    continue
                # Bound here: the pod is ours to start now, and the watch brings the bound pod soon. The event is
                # for people and nothing waits for it.
                worker.pod = {**worker.pod, "spec": {**worker.pod["spec"], "nodeName": NODE_NAME}}
                self._in_background(post_event(
                    self.client, worker.pod, kind="Pod", reason="Scheduled", component="scheduler",
                    message=f"Successfully assigned {worker.namespace}/{worker.name} to {NODE_NAME}"))
                continue
            worker.unschedulable(problem)
            waits = [asyncio.ensure_future(change.wait()) for change in changes]
            try:
                await asyncio.wait(waits, timeout=CLAIM_RECHECK, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
        return True

    async def _unbound_claim(self, pod: Object) -> str | None:
        """Why the pod cannot be scheduled yet, or None. Asks for WaitForFirstConsumer claims on the way."""
        namespace = pod["metadata"]["namespace"]
        for volume in pod["spec"].get("volumes", []):
            if "persistentVolumeClaim" not in volume:
                continue
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = await self.bound_claim(namespace, claim)
            if pvc is None:
                return f'persistentvolumeclaim "{claim}" not found'
            if pvc.get("status", {}).get("phase") == "Bound":
                continue
            sc_name = pvc["spec"].get("storageClassName")
            sc = await self.client.get_or_none(path("storageclasses", group="storage.k8s.io", name=sc_name)) \
                if sc_name else None
            if (sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"
                    and SELECTED_NODE not in pvc["metadata"].get("annotations", {})):
                await self.client.patch(path("persistentvolumeclaims", namespace=namespace, name=claim),
                                        {"metadata": {"annotations": {SELECTED_NODE: NODE_NAME}}})
            return f'waiting for persistentvolumeclaim "{claim}" to be bound'
        return None

    async def bound_claim(self, namespace: str, name: str) -> Object | None:
        """The claim, from the watch when it shows it Bound (binding does not go back), else from the API server."""
        seen = self.claims.get((namespace, name))
        if seen is not None and seen.get("status", {}).get("phase") == "Bound" and seen["spec"].get("volumeName"):
            return seen
        return await self.client.get_or_none(path("persistentvolumeclaims", namespace=namespace, name=name))

    # -- pods -------------------------------------------------------------------------------------------------

    async def _on_pod(self, kind: str, pod: Object) -> None:
        if self._closed:
            return
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker is not None:
                del self.workers[uid]
                self._in_background(worker.stop(_grace(pod)))
            return
        if worker is not None:
            worker.pod = pod
            if pod["metadata"].get("deletionTimestamp") and not worker.stopping:
                self._in_background(self._terminate(worker))
            return
        node = pod["spec"].get("nodeName")
        if (node and node != NODE_NAME) or pod.get("status", {}).get("phase") in ("Succeeded", "Failed") \
                or pod["metadata"].get("deletionTimestamp"):
            return
        worker = PodWorker(self, pod)
        self.workers[uid] = worker
        worker.start()

    async def _terminate(self, worker: PodWorker) -> None:
        await worker.stop(_grace(worker.pod))
        await worker.publish()
        await self.client.delete(path("pods", namespace=worker.namespace, name=worker.name), grace_period=0)

    def _in_background(self, work: asyncio.Future[None] | asyncio.Task[None] | object) -> None:
        task = asyncio.ensure_future(work)  # type: ignore[arg-type]
        self._stopping.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Future[None]) -> None:
        self._stopping.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("kubelet: background work failed: %s", task.exception())

    # -- logs (the API server's log provider) -----------------------------------------------------------------

    def logs(self, *, namespace: str, name: str, container: str | None, follow: bool, previous: bool,
             tail_lines: int | None) -> bytes | AsyncIterator[bytes]:
        worker = next((w for w in self.workers.values() if (w.namespace, w.name) == (namespace, name)), None)
        if worker is None:
            raise ServedError(400, "BadRequest", f'pod "{name}" has not been started on node {NODE_NAME}')
        chosen = _choose(worker, container)
        if previous:
            log_file = worker.dir / "logs" / chosen.name / f"{chosen.restart_count - 1}.log"
            if chosen.restart_count == 0 or not log_file.exists():
                raise ServedError(400, "BadRequest",
                                  f'previous terminated container "{chosen.name}" in pod "{name}" not found')
            return podspec.log_tail(log_file.read_bytes(), tail_lines)
        if chosen.log_file is None or not chosen.log_file.exists():
            reason = chosen.state.get("waiting", {}).get("reason", "ContainerCreating")
            raise ServedError(400, "BadRequest",
                              f'container "{chosen.name}" in pod "{name}" is waiting to start: {reason}')
        head = podspec.log_tail(chosen.log_file.read_bytes(), tail_lines)
        if not follow:
            return head
        return _follow(worker, chosen, chosen.log_file, head)


def _choose(worker: PodWorker, name: str | None) -> Container:
    if name is None:
        if len(worker.containers) != 1:
            names = " ".join(c.name for c in worker.containers)
            raise ServedError(400, "BadRequest",
                              f"a container name must be specified for pod {worker.name}, choose one of: [{names}]")
        return worker.containers[0]
    for candidate in worker.all_containers():
        if candidate.name == name:
            return candidate
    raise ServedError(400, "BadRequest", f"container {name} is not valid for pod {worker.name}")


async def _follow(worker: PodWorker, container: Container, log_file: Path, head: bytes) -> AsyncIterator[bytes]:
    """The log so far, then what the running container writes, until it ends (kubectl logs -f)."""
    yield head
    offset = log_file.stat().st_size
    with log_file.open("rb") as f:
        f.seek(offset)
        while True:
            finished = container.log_file != log_file or "terminated" in container.state or worker.stopping
            chunk = f.read()
            if chunk:
                yield chunk
            elif finished:
                return
            else:
                await asyncio.sleep(0.2)


def _grace(pod: Object) -> float:
    meta_grace = pod["metadata"].get("deletionGracePeriodSeconds")
    return float(meta_grace if meta_grace is not None else pod["spec"].get("terminationGracePeriodSeconds", 30))


def _memory_kib() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    return 0
