"""The storage provisioner and PV binder: a client of the API, like a CSI external-provisioner.

For a PVC of a StorageClass whose `provisioner` is PROVISIONER it makes a PV `pvc-<uid>` backed by a sparse
file `<workdir>/pvc-<uid>.img` of the requested size and binds the two. Filesystem volumes are ext4 on a loop
device, mounted at `<workdir>/pvc-<uid>/` (so free space is real); Block volumes are the loop device itself.
The PV says where in `spec.hostPath`: `type: Directory` with the mount dir, or `type: BlockDevice` with the
device; the kubelet reads it from there. A Filesystem claim is bound as soon as its loop device is attached: its
ext4 is made and mounted meanwhile, and the kubelet waits for that before a pod uses the volume
(hostvolumes.staged). If it fails, the claim has a ProvisioningFailed event and its pods a FailedMount one.

WaitForFirstConsumer classes: the PVC stays Pending (event WaitForFirstConsumer) until the scheduler sets
`volume.kubernetes.io/selected-node`. PVCs with a `dataSourceRef` to a populator's kind are left alone, as the
real provisioner does. Like the PV controller, a PV whose `claimRef` is moved to another Pending PVC (how
volume populators hand over a populated volume) binds that PVC. Deleting a PVC deletes its PV under reclaim
policy Delete (Retain: the PV becomes Released); a deleted PV's file, mount and loop device are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..client import APIError, Client, Object, path, post_event
from . import hostvolumes
from .quantity import parse_quantity

log = logging.getLogger(__name__)

PROVISIONER = "localkube.dev/local"
NODE_NAME = "localkube"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BACKING_FILE = "localkube.dev/backing-file"
STORAGE_PROVISIONER = ("volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner")


@dataclass
class Backing:
    file: Path
    device: str
    mount: Path | None  # None for Block volumes
    staging: asyncio.Task[None] | None = None  # the filesystem being made and mounted (hostvolumes.staged)


class Provisioner:
    def __init__(self, client: Client, workdir: Path) -> None:
        self.client = client
        self.workdir = workdir
        self._backings: dict[str, Backing] = {}  # by PV name
        # PVC uids provisioned or being provisioned: watch events can be older than our own writes.
        self._claimed: set[str] = set()
        self._waiting_reported: set[str] = set()
        self._lock = asyncio.Lock()  # host changes one at a time: finding a free loop device races with itself
        self._classes: dict[str, Object] = {}  # StorageClasses as their watch last delivered them

    async def run(self, synced: asyncio.Event | None = None) -> None:
        await hostvolumes.release_leftovers(self.workdir)
        pv_synced = asyncio.Event()
        pvs = asyncio.create_task(self.client.inform(path("persistentvolumes"), self._on_pv, synced=pv_synced))
        classes = asyncio.create_task(self.client.inform(path("storageclasses", group="storage.k8s.io"),
                                                         self._on_class))
        try:
            await pv_synced.wait()
            await self.client.inform(path("persistentvolumeclaims"), self._on_pvc, synced=synced)
        finally:
            pvs.cancel()
            classes.cancel()

    async def _on_class(self, kind: str, sc: Object) -> None:
        if kind == "DELETED":
            self._classes.pop(sc["metadata"]["name"], None)
        else:
            self._classes[sc["metadata"]["name"]] = sc

    async def _storage_class(self, name: str) -> Object | None:
        """From the watch, or asked for when the claim came first: a class's provisioner and binding mode never
        change, and every claim read it afresh on the way to its Bound."""
        return self._classes.get(name) or await self.client.get_or_none(
            path("storageclasses", group="storage.k8s.io", name=name))

    async def shutdown(self) -> None:
        """Releases every volume this provisioner made (the objects die with the in-memory API server)."""
        errors = []
        for name in list(self._backings):
            try:
                await self._release(name)
            except hostvolumes.HostError as exc:
                errors.append(str(exc))
        if errors:
            raise hostvolumes.HostError("; ".join(errors))

    # -- claims -----------------------------------------------------------------------------------------------

    async def _on_pvc(self, kind: str, pvc: Object) -> None:
        meta = pvc["metadata"]
        if kind == "DELETED":
            await self._claim_deleted(pvc)
            return
        if meta.get("deletionTimestamp") or pvc.get("status", {}).get("phase") == "Bound":
            return
        if pvc["spec"].get("volumeName"):
            return  # a volume is chosen: binding it is _on_pv's job, when the PV's claimRef names this claim
        if meta["uid"] in self._claimed:
            return
        sc_name = pvc["spec"].get("storageClassName")
        sc = await self._storage_class(sc_name) if sc_name else None
        if sc is None or sc.get("provisioner") != PROVISIONER:
            return
        marked: asyncio.Future[Any] | None = None
        if any(meta.get("annotations", {}).get(key) != PROVISIONER for key in STORAGE_PROVISIONER):
            # As the PV controller marks a claim for its provisioner (CDI reads this to pick its import path);
            # the volume is made meanwhile, and the mark is there before the claim is Bound.
            marked = asyncio.ensure_future(self.client.patch(
                path("persistentvolumeclaims", namespace=meta["namespace"], name=meta["name"]),
                {"metadata": {"annotations": {key: PROVISIONER for key in STORAGE_PROVISIONER}}}))
        try:
            if _populated_elsewhere(pvc):
                return
            if (sc.get("volumeBindingMode") == "WaitForFirstConsumer"
                    and SELECTED_NODE not in meta.get("annotations", {})):
                if meta["uid"] not in self._waiting_reported:
                    self._waiting_reported.add(meta["uid"])
                    await self.event(pvc, "WaitForFirstConsumer",
                                     "waiting for first consumer to be created before binding")
                return
            self._claimed.add(meta["uid"])
            try:
                await self._provision(pvc, sc, marked=marked)
            except (ValueError, hostvolumes.HostError, APIError) as exc:
                self._claimed.discard(meta["uid"])  # the claim's next change tries again
                await self.event(pvc, "ProvisioningFailed", str(exc), warning=True)
        finally:
            if marked is not None:
                with contextlib.suppress(APIError):  # the claim is gone; a provisioning it failed has said so
                    await marked

    async def _provision(self, pvc: Object, sc: Object, *, marked: asyncio.Future[Any] | None) -> None:
        meta, spec = pvc["metadata"], pvc["spec"]
        requested = spec.get("resources", {}).get("requests", {}).get("storage")
        if requested is None:
            raise ValueError("the claim requests no storage (spec.resources.requests.storage)")
        size = parse_quantity(requested)
        name = f"pvc-{meta['uid']}"
        block = spec.get("volumeMode") == "Block"
        if name not in self._backings:
            self._backings[name] = await self._make_backing(name, size, block=block, pvc=pvc)
        backing = self._backings[name]
        pv = {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER,
                                                       BACKING_FILE: str(backing.file)}},
            "spec": {
                "capacity": {"storage": requested},
                "accessModes": spec.get("accessModes", ["ReadWriteOnce"]),
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
                "storageClassName": sc["metadata"]["name"],
                "volumeMode": "Block" if block else "Filesystem",
                "hostPath": ({"path": backing.device, "type": "BlockDevice"} if block
                             else {"path": str(backing.mount), "type": "Directory"}),
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                             "name": meta["name"], "uid": meta["uid"]},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAME]}]}]}},
            },
        }
        try:
            pv = await self.client.create(path("persistentvolumes"), pv)
        except APIError as exc:
            if exc.code != 409:
                raise
            pv = await self.client.get(path("persistentvolumes", name=name))
        if marked is not None:
            await marked
        await self._bind(pvc, pv)  # before the event, which nothing waits for: the claim's user waits for Bound
        await self.event(pvc, "ProvisioningSucceeded", f"Successfully provisioned volume {name}")

    async def _bind(self, pvc: Object, pv: Object) -> None:
        meta = pvc["metadata"]
        pv_name = pv["metadata"]["name"]
        # The claim's Bound comes last, when its volumeName and the volume's Bound are there to be read.
        await asyncio.gather(
            self.client.patch(path("persistentvolumes", name=pv_name, subresource="status"),
                              {"status": {"phase": "Bound"}}),
            self.client.patch(path("persistentvolumeclaims", namespace=meta["namespace"], name=meta["name"]), {
                "metadata": {"annotations": {BIND_COMPLETED: "yes", "pv.kubernetes.io/bound-by-controller": "yes"}},
                "spec": {"volumeName": pv_name}}))
        await self.client.patch(
            path("persistentvolumeclaims", namespace=meta["namespace"], name=meta["name"], subresource="status"),
            {"status": {"phase": "Bound", "capacity": pv["spec"]["capacity"],
                        "accessModes": pv["spec"]["accessModes"]}})

    async def _claim_deleted(self, pvc: Object) -> None:
        uid = pvc["metadata"]["uid"]
        self._waiting_reported.discard(uid)
        self._claimed.discard(uid)
        for pv in (await self.client.list(path("persistentvolumes")))["items"]:
            if pv["spec"].get("claimRef", {}).get("uid") != uid:
                continue
            if pv["spec"].get("persistentVolumeReclaimPolicy", "Delete") == "Delete":
                await self.client.delete(path("persistentvolumes", name=pv["metadata"]["name"]))
            else:
                await self.client.patch(path("persistentvolumes", name=pv["metadata"]["name"], subresource="status"),
                                        {"status": {"phase": "Released"}})

    # -- volumes ----------------------------------------------------------------------------------------------

    async def _on_pv(self, kind: str, pv: Object) -> None:
        name = pv["metadata"]["name"]
        if kind == "DELETED":
            if name in self._backings:
                await self._release(name)
            return
        claim = pv["spec"].get("claimRef")
        if not claim or pv.get("status", {}).get("phase") == "Released":
            return
        if claim.get("uid") in self._claimed:
            return  # provisioned here for that claim: _provision binds it, and a second bind repeats its writes
        pvc = await self.client.get_or_none(path("persistentvolumeclaims", namespace=claim["namespace"],
                                                 name=claim["name"]))
        # A claimRef moved onto a waiting claim (a populator's rebind) completes the binding on that claim.
        if (pvc is not None and pvc.get("status", {}).get("phase") != "Bound"
                and claim.get("uid") in (None, pvc["metadata"]["uid"])
                and pvc["spec"].get("volumeName") in (None, "", name)):
            await self._bind(pvc, pv)

    async def _make_backing(self, name: str, size: int, *, block: bool, pvc: Object) -> Backing:
        """The loop device now; for a Filesystem volume, its ext4 made and mounted meanwhile (hostvolumes.staged)."""
        backing_file = self.workdir / f"{name}.img"
        async with self._lock:
            hostvolumes.make_sparse_file(backing_file, size)
            device = hostvolumes.attach_loop(backing_file)
        if block:
            return Backing(backing_file, device, None)
        mount = self.workdir / name
        mount.mkdir(parents=True, exist_ok=True)
        lock = hostvolumes.lock_for_staging(backing_file)  # before the volume is seen: the kubelet waits for it
        return Backing(backing_file, device, mount, asyncio.ensure_future(self._stage(device, mount, lock, pvc)))

    async def _stage(self, device: str, mount: Path, lock: int, pvc: Object) -> None:
        try:
            async with self._lock:
                await hostvolumes.make_ext4(device)
                await hostvolumes.mount(device, mount)
        except hostvolumes.HostError as exc:  # the kubelet finds nothing mounted and says so on the pod
            with contextlib.suppress(APIError):
                await self.event(pvc, "ProvisioningFailed", str(exc), warning=True)
        finally:
            os.close(lock)

    async def _release(self, name: str) -> None:
        backing = self._backings.pop(name)
        if backing.staging is not None:
            await asyncio.wait([backing.staging])
        async with self._lock:
            if backing.mount is not None:
                if os.path.ismount(backing.mount):
                    await hostvolumes.unmount(backing.mount)
                backing.mount.rmdir()
            await hostvolumes.detach_loop(backing.device)
            backing.file.unlink(missing_ok=True)

    async def event(self, pvc: Object, reason: str, message: str, *, warning: bool = False) -> None:
        await post_event(self.client, pvc, kind="PersistentVolumeClaim", reason=reason, message=message,
                         component=PROVISIONER, warning=warning)


def _populated_elsewhere(pvc: Object) -> bool:
    """A dataSourceRef to a kind outside the core API is a volume populator's job, not the provisioner's."""
    ref: dict[str, Any] = pvc["spec"].get("dataSourceRef") or {}
    return bool(ref.get("apiGroup"))

