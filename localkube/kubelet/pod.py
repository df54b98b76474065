"""One pod on the node: its volumes, its containers as sandboxed processes, restarts, probes and status."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp

from ..client import APIError, Object, now, path, post_event
from ..storage import hostvolumes
from ..storage.provisioner import BACKING_FILE
from . import podspec
from .images import CannotRun, container_argv

if TYPE_CHECKING:
    from .kubelet import Kubelet

log = logging.getLogger(__name__)
T = TypeVar("T")
START_GRACE = 0.05  # seconds a pod's first status waits for its first container to start

COMPONENT = "kubelet"


@dataclass
class Container:
    spec: Object
    init: bool
    restart_count: int = 0
    state: Object = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Object = field(default_factory=dict)
    ready: bool = False
    active: bool = False  # has run, and is running or going to run again
    exit_code: int | None = None
    process: asyncio.subprocess.Process | None = None
    log_file: Path | None = None

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> Object:
        running = "running" in self.state
        return {"name": self.name, "image": self.spec.get("image", ""), "imageID": "",
                "containerID": f"localkube://{self.process.pid}" if self.process else "",
                "state": self.state, "lastState": self.last_state, "ready": self.ready and running,
                "started": running, "restartCount": self.restart_count}


@dataclass
class Mount:
    source: str
    target: str
    read_only: bool = False


class PodWorker:
    def __init__(self, kubelet: Kubelet, pod: Object) -> None:
        self.kubelet = kubelet
        self.pod = pod
        self.uid: str = pod["metadata"]["uid"]
        self.namespace: str = pod["metadata"]["namespace"]
        self.name: str = pod["metadata"]["name"]
        self.dir = kubelet.workdir / "pods" / self.uid
        self.ip = kubelet.allocate_ip()
        self.init_containers = [Container(c, True) for c in pod["spec"].get("initContainers", [])]
        self.containers = [Container(c, False) for c in pod["spec"]["containers"]]
        self.volumes: dict[str, str] = {}  # volume name -> host path (dir, file or block device)
        self.conditions: dict[str, Object] = {}
        self.initialized = not self.init_containers
        self.init_failed = False
        self.started_at: str | None = None
        self.stopping = False
        self.changed = asyncio.Event()  # wakes the status writer
        self.first_start = asyncio.Event()  # the first container has started, or could not
        self.published: Object | None = None  # the status last written
        self._publishing = asyncio.Lock()  # status writes one at a time, in the order they were asked for
        self.task: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")
        self.task.add_done_callback(self._report_failure)

    def _report_failure(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("pod %s/%s: the kubelet gave up on it", self.namespace, self.name, exc_info=task.exception())

    async def stop(self, grace: float) -> None:
        """SIGTERM to every container, SIGKILL after grace seconds; then the pod's files go."""
        self.stopping = True
        running = [c for c in self.all_containers() if c.process is not None and c.process.returncode is None]
        for container in running:
            _signal_group(container, signal.SIGTERM)
        if running:
            waits = [asyncio.create_task(c.process.wait()) for c in running if c.process]
            _, pending = await asyncio.wait(waits, timeout=grace)
            for container in running:
                _signal_group(container, signal.SIGKILL)
            if pending:
                await asyncio.wait(pending)
        if self.task is not None:
            # Containers that just exited get their terminated state recorded; a back-off or scheduling
            # wait is simply cut short.
            await asyncio.wait([self.task], timeout=1)
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        for container in self.all_containers():  # one that was starting while we signalled the others
            if container.process is not None and container.process.returncode is None:
                _signal_group(container, signal.SIGKILL)
                await container.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def all_containers(self) -> list[Container]:
        return self.init_containers + self.containers

    async def _run(self) -> None:
        writer = asyncio.create_task(self._write_status())
        try:
            if not await self.kubelet.schedule(self):
                return
            self.started_at = now()
            self._condition("PodScheduled", True)
            self._condition("Initialized", self.initialized)
            self._condition("ContainersReady", False)
            self._condition("Ready", False)
            await self._prepare_volumes()
            for container in self.init_containers:
                if not await self._run_until_done(container):
                    self.init_failed = True
                    self.changed.set()
                    return
            self.initialized = True
            self._condition("Initialized", True)
            await asyncio.gather(*(self._run_until_done(c) for c in self.containers))
        finally:
            # No await before the writer is cancelled: stop() may cancel this task at any await.
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            if not self.stopping:
                await self.publish()  # the final status, which the writer may not have sent

    async def _run_until_done(self, container: Container) -> bool:
        """Runs a container, restarting it per restartPolicy (init containers: until they succeed, unless
        Never); True when it ended successfully."""
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if container.init and policy == "Always":
            policy = "OnFailure"
        probe = (asyncio.create_task(self._probe(container))
                 if not container.init and "readinessProbe" in container.spec else None)
        try:
            while True:
                code = await self._run_once(container)
                if self.stopping:
                    return False
                if not podspec.restarts(policy, code):
                    container.active = False
                    self.changed.set()
                    return code == 0
                delay = podspec.backoff(container.restart_count, base=self.kubelet.backoff_base,
                                        cap=self.kubelet.backoff_cap)
                container.last_state = container.state
                container.state = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                    f"back-off {delay:g}s restarting failed container={container.name} pod={self.name}")}}
                container.restart_count += 1
                self.changed.set()
                await asyncio.sleep(delay)
        finally:
            if probe is not None:
                probe.cancel()

    async def _run_once(self, container: Container) -> int:
        spec = container.spec
        attempt = container.restart_count
        logs = self.dir / "logs" / container.name
        logs.mkdir(parents=True, exist_ok=True)
        container.log_file = logs / f"{attempt}.log"
        message_file = self.dir / "termination" / f"{container.name}-{attempt}"
        message_file.parent.mkdir(parents=True, exist_ok=True)
        message_file.write_bytes(b"")
        try:
            env, argv, mounts = await self._configure(container, message_file)
        except CannotRun as exc:
            return self._terminated(container, 128, "ContainerCannotRun", str(exc))
        base_env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOSTNAME": self.name,
                    "HOME": "/root"}
        sandbox = {"root": str(self._root(container)),
                   "mounts": [{"source": m.source, "target": m.target, "readOnly": m.read_only} for m in mounts],
                   "workingDir": spec.get("workingDir", ""), "argv": argv, "env": {**base_env, **env}}
        started = now()
        error = await self._spawn(container, sandbox)
        self.first_start.set()
        if error:
            return self._terminated(container, 128, "StartError", error, started=started)
        container.state = {"running": {"startedAt": started}}
        container.active = True
        if "readinessProbe" not in spec:  # without a probe a container is ready once it runs
            container.ready = True
        self._update_readiness()
        assert container.process is not None
        code = await container.process.wait()
        _signal_group(container, signal.SIGKILL)  # what the container left running goes with it
        if code < 0:  # killed by a signal: the shell convention, as container runtimes report it
            code = 128 - code
        text = podspec.termination_message(
            policy=spec.get("terminationMessagePolicy", "File"), file_text=message_file.read_bytes(),
            log=container.log_file.read_bytes(), exit_code=code)
        return self._terminated(container, code, "Completed" if code == 0 else "Error", text, started=started)

    async def _configure(self, container: Container, message_file: Path
                         ) -> tuple[dict[str, str], list[str], list[Mount]]:
        """Environment, argv and mounts; a missing Secret or key is waited for (CreateContainerConfigError)."""
        spec = container.spec

        async def attempt() -> tuple[dict[str, str], list[str], list[Mount]]:
            env = await podspec.container_env(spec, self._pod_with_status(), self.kubelet.fetch(self.namespace))
            argv = [podspec.expand(a, env) for a in container_argv(
                self.kubelet.images, image=spec.get("image", ""), command=spec.get("command"), args=spec.get("args"))]
            return env, argv, self._mounts(spec, message_file)

        def waiting(message: str) -> None:
            container.state = {"waiting": {"reason": "CreateContainerConfigError", "message": message}}
            self.changed.set()

        return await self._until_configured(attempt, reason="Failed", prefix="Error: ", on_error=waiting)

    async def _until_configured(self, attempt: Callable[[], Awaitable[T]], *, reason: str, prefix: str,
                                on_error: Callable[[str], None] | None = None) -> T:
        """Retries attempt while a Secret, ConfigMap or claim it needs is missing (as the kubelet waits for
        them), with one Warning event saying what is missing."""
        reported = False
        while True:
            try:
                return await attempt()
            except podspec.ConfigError as exc:
                if on_error is not None:
                    on_error(str(exc))
                if not reported:
                    reported = True
                    await post_event(self.kubelet.client, self.pod, kind="Pod", reason=reason,
                                     message=f"{prefix}{exc}", component=COMPONENT, warning=True)
                await asyncio.sleep(max(self.kubelet.backoff_base, 0.5))

    def _terminated(self, container: Container, code: int, reason: str, message: str, *,
                    started: str | None = None) -> int:
        state: Object = {"exitCode": code, "reason": reason, "startedAt": started or now(), "finishedAt": now()}
        if message:
            state["message"] = message
        container.state = {"terminated": state}
        container.exit_code = code
        container.ready = False
        self._update_readiness()
        return code

    async def _spawn(self, container: Container, sandbox: Object) -> str:
        """Starts the container's process; returns its error before exec, or "" once the container runs."""
        self._root(container).mkdir(parents=True, exist_ok=True)
        assert container.log_file is not None
        container.process, error = await self.kubelet.spawner.spawn(sandbox, log_file=container.log_file)
        return error

    def _root(self, container: Container) -> Path:
        return self.dir / "roots" / container.name

    # -- volumes ----------------------------------------------------------------------------------------------

    async def _prepare_volumes(self) -> None:
        """Resolves every volume to a host path (Kubernetes' FailedMount while something is missing)."""
        async def attempt() -> None:
            for volume in self.pod["spec"].get("volumes", []):
                self.volumes[volume["name"]] = await self._volume_source(volume)

        await self._until_configured(attempt, reason="FailedMount", prefix="MountVolume.SetUp failed: ")

    async def _volume_source(self, volume: Object) -> str:
        name = volume["name"]
        fs_group = self.pod["spec"].get("securityContext", {}).get("fsGroup")
        own = self.dir / "volumes" / name
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = await self.kubelet.bound_claim(self.namespace, claim)
            volume_name = (pvc or {}).get("spec", {}).get("volumeName")
            if not volume_name:
                raise podspec.ConfigError(f'persistentvolumeclaim "{claim}" is not bound')
            pv = await self.kubelet.client.get(path("persistentvolumes", name=volume_name))
            source = pv["spec"].get("hostPath", {}).get("path") or pv["spec"].get("local", {}).get("path")
            if not source:
                raise podspec.ConfigError(f"persistentvolume {volume_name} has no hostPath or local path")
            backing = (pv["metadata"].get("annotations") or {}).get(BACKING_FILE)
            if backing and pv["spec"].get("volumeMode") != "Block":  # made here: its filesystem may be on its way
                try:
                    await hostvolumes.staged(Path(backing))
                except FileNotFoundError:
                    raise podspec.ConfigError(f"persistentvolume {volume_name}: its backing file is gone") from None
                if not os.path.ismount(source):
                    raise podspec.ConfigError(f"persistentvolume {volume_name}: its filesystem could not be made")
            if Path(source).is_dir():
                _give_group(Path(source), fs_group)
            return str(source)
        if "emptyDir" in volume:
            own.mkdir(parents=True, exist_ok=True)
            _give_group(own, fs_group)
            return str(own)
        if "hostPath" in volume:
            return str(volume["hostPath"]["path"])
        for kind, resource, key in (("secret", "secrets", "secretName"), ("configMap", "configmaps", "name")):
            if kind in volume:
                await self._write_object_volume(volume[kind], resource, volume[kind][key], own)
                return str(own)
        raise podspec.ConfigError(f"volume {name}: only persistentVolumeClaim, emptyDir, hostPath, secret and "
                                  "configMap volumes are supported by localkube")

    async def _write_object_volume(self, source: Object, resource: str, object_name: str, target: Path) -> None:
        obj = await self.kubelet.fetch(self.namespace)(resource, object_name)
        if obj is None and not source.get("optional"):
            raise podspec.ConfigError(f'{resource[:-1]} "{object_name}" not found')
        items = podspec.object_items(obj or {})
        wanted = {item["key"]: item for item in source.get("items", [])} or {k: {"path": k} for k in items}
        target.mkdir(parents=True, exist_ok=True)
        for key, item in wanted.items():
            if key not in items:
                raise podspec.ConfigError(f'{resource[:-1]} "{object_name}": key {key} not found')
            file = target / item["path"]
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(items[key])
            file.chmod(item.get("mode", source.get("defaultMode", 0o644)))

    def _mounts(self, spec: Object, message_file: Path) -> list[Mount]:
        mounts = []
        for mount in spec.get("volumeMounts", []):
            if mount["name"] not in self.volumes:
                raise podspec.ConfigError(f'volumeMount {mount["name"]}: no volume of that name')
            source = Path(self.volumes[mount["name"]])
            if mount.get("subPath"):
                source = source / mount["subPath"]
                source.mkdir(parents=True, exist_ok=True)
            mounts.append(Mount(str(source), mount["mountPath"], bool(mount.get("readOnly"))))
        for device in spec.get("volumeDevices", []):
            if device["name"] not in self.volumes:
                raise podspec.ConfigError(f'volumeDevice {device["name"]}: no volume of that name')
            mounts.append(Mount(self.volumes[device["name"]], device["devicePath"]))
        mounts.append(Mount(str(message_file), spec.get("terminationMessagePath", "/dev/termination-log")))
        # Parents before children, so a mount inside another volume lands in that volume.
        return sorted(mounts, key=lambda m: len(Path(m.target).parts))

    # -- readiness --------------------------------------------------------------------------------------------

    async def _probe(self, container: Container) -> None:
        """httpGet readiness probes against the pod IP; other probe kinds are not run (the container counts
        as ready while it runs)."""
        probe = container.spec["readinessProbe"]
        http = probe.get("httpGet")
        period = probe.get("periodSeconds", 10)
        successes = failures = 0
        await asyncio.sleep(probe.get("initialDelaySeconds", 0))
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=probe.get("timeoutSeconds", 1))) as s:
            while True:
                running = "running" in container.state
                ok = running and (http is None or await self._http_ok(s, http, container))
                successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
                if ok and successes >= probe.get("successThreshold", 1) and not container.ready:
                    container.ready = True
                    self._update_readiness()
                elif not ok and container.ready and (failures >= probe.get("failureThreshold", 3) or not running):
                    container.ready = False
                    self._update_readiness()
                await asyncio.sleep(period)

    async def _http_ok(self, session: aiohttp.ClientSession, http: Object, container: Container) -> bool:
        port = http["port"]
        if isinstance(port, str) and not port.isdigit():
            port = next((p["containerPort"] for p in container.spec.get("ports", []) if p.get("name") == port), 0)
        url = f"{http.get('scheme', 'HTTP').lower()}://{http.get('host', self.ip)}:{port}{http.get('path', '/')}"
        headers = {h["name"]: h["value"] for h in http.get("httpHeaders", [])}
        try:
            async with session.get(url, headers=headers, ssl=False) as response:
                return 200 <= response.status < 400
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    def _update_readiness(self) -> None:
        ready = all(c.ready for c in self.containers)
        self._condition("ContainersReady", ready)
        self._condition("Ready", ready)

    # -- status -----------------------------------------------------------------------------------------------

    def _condition(self, kind: str, status: bool, reason: str | None = None, message: str | None = None) -> None:
        value = "True" if status else "False"
        old = self.conditions.get(kind)
        if old is not None and old["status"] == value and old.get("reason") == reason:
            return
        condition: Object = {"type": kind, "status": value, "lastProbeTime": None, "lastTransitionTime": now()}
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        self.conditions[kind] = condition
        self.changed.set()

    def phase(self) -> str:
        return podspec.pod_phase(init_failed=self.init_failed, initialized=self.initialized,
                                 containers=[(c.active, c.exit_code) for c in self.containers])

    def status(self) -> Object:
        status: Object = {"phase": self.phase(), "conditions": list(self.conditions.values()),
                          "containerStatuses": [c.status() for c in self.containers]}
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if self.started_at:
            status.update({"hostIP": self.kubelet.host_ip, "hostIPs": [{"ip": self.kubelet.host_ip}],
                           "podIP": self.ip, "podIPs": [{"ip": self.ip}], "startTime": self.started_at})
        return status

    def unschedulable(self, message: str) -> None:
        self._condition("PodScheduled", False, "Unschedulable", message)

    def _pod_with_status(self) -> Object:
        return {**self.pod, "status": self.status()}

    async def publish(self) -> None:
        """Writes the status unless it is the one last written: the writer and the pod's end (or its
        termination) may both try to send the final one, and each write wakes every watcher of pods."""
        async with self._publishing:
            status = self.status()
            if status == self.published:
                return
            try:
                await self.kubelet.client.patch(path("pods", namespace=self.namespace, name=self.name,
                                                     subresource="status"), {"status": status})
            except APIError as exc:
                if exc.code != 404:  # a deleted pod has no status to write
                    raise
            self.published = status

    async def _write_status(self) -> None:
        """One writer per pod, so status patches never interleave; changes made meanwhile are coalesced.

        A pod's first status waits up to START_GRACE for its first container to start: a container starts
        within milliseconds here, and Pending (ContainerCreating) written just before Running was one more
        write, and one more reaction from every watcher (the CDI controller: a PVC annotation and a DataVolume
        status for each). A pod that takes longer to start still shows Pending after START_GRACE."""
        while True:
            await self.changed.wait()
            if not self.first_start.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.first_start.wait(), START_GRACE)
            self.changed.clear()
            try:
                # Shielded: the pod's end cancels the writer, often while it sends the very status the end
                # would send. Cut off, that write was lost and sent again on a new connection, 5 ms later.
                await asyncio.shield(self.publish())
            except (APIError, aiohttp.ClientError) as exc:
                log.warning("pod %s/%s: status update failed: %s", self.namespace, self.name, exc)
                self.changed.set()
                await asyncio.sleep(0.5)


def _signal_group(container: Container, sig: int) -> None:
    if container.process is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(container.process.pid, sig)


def _give_group(directory: Path, fs_group: Any) -> None:
    """fsGroup: the volume root belongs to the group, group-writable and setgid, as the kubelet does."""
    if fs_group is None:
        return
    os.chown(directory, -1, int(fs_group))
    directory.chmod(directory.stat().st_mode | 0o2070)
