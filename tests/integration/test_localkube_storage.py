"""The localkube provisioner: real ext4 on loop devices and raw loop block devices, seen through the pods and
through the backing files; Immediate and WaitForFirstConsumer binding; reclaim on delete."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from localkube.cluster import Cluster
from localkube.storage import hostvolumes, parse_quantity
from tests.fixtures.localkube_cluster import (ClusterAPI, claim_volume, pod_manifest, pvc_manifest,
                                              wait_for)

NS = "/api/v1/namespaces/default"


def bound_pv(api: ClusterAPI, claim: str) -> dict[str, Any]:
    pvc = wait_for(lambda: (lambda c: c if c and c["status"].get("phase") == "Bound" else None)(
        api.get(f"{NS}/persistentvolumeclaims/{claim}")), what=f"claim {claim} bound")
    pv = api.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
    assert pv is not None
    return pv


def backing_file(pv: dict[str, Any]) -> Path:
    return Path(pv["metadata"]["annotations"]["localkube.dev/backing-file"])


@pytest.mark.root
def test_pods_see_the_bytes_of_the_backing_files(localkube_cluster: Cluster, cluster_api: ClusterAPI,
                                                 cluster_kubectl: Any) -> None:
    block_data = os.urandom(256 * 1024)
    cluster_kubectl("create", "-f", "-", objects=[
        pvc_manifest("fs"), pvc_manifest("blk", mode="Block"),
        pod_manifest("writer", "echo hi > /data/x", volumes=[claim_volume("d", "fs")],
                     volumeMounts=[{"name": "d", "mountPath": "/data"}]),
        pod_manifest("dd-writer", "head -c 4096 /dev/zero | tr '\\0' 'B' | dd of=/dev/disk bs=4096 seek=100 "
                     "conv=notrunc,fsync", volumes=[claim_volume("d", "blk")],
                     volumeDevices=[{"name": "d", "devicePath": "/dev/disk"}]),
    ])
    fs_pv, block_pv = bound_pv(cluster_api, "fs"), bound_pv(cluster_api, "blk")
    assert cluster_api.wait_phase("writer", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    assert cluster_api.wait_phase("dd-writer", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"

    # The Filesystem volume is a real ext4 in its backing file: read the file the pod wrote from the image
    # (after a sync, as the volume is still mounted and its writes may be cached).
    os.sync()
    dumped = subprocess.run(["debugfs", "-R", "cat /x", str(backing_file(fs_pv))], capture_output=True)
    assert dumped.stdout == b"hi\n"
    assert fs_pv["spec"]["capacity"] == {"storage": "4Mi"} and fs_pv["spec"]["volumeMode"] == "Filesystem"
    provisioned = [e["involvedObject"]["name"] for e in cluster_api.events() if e["reason"] == "ProvisioningSucceeded"]
    assert sorted(provisioned) == ["blk", "fs"]

    image = backing_file(block_pv)
    assert image.stat().st_size == 4 * 1024 * 1024
    with image.open("rb") as f:
        f.seek(100 * 4096)
        assert f.read(4096) == b"B" * 4096

    # The other way round: bytes put into the backing file are what a pod reads from its device.
    with image.open("r+b") as f:
        f.write(block_data)
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "reader", "head -c 262144 /dev/disk | sha256sum", volumes=[claim_volume("d", "blk")],
        volumeDevices=[{"name": "d", "devicePath": "/dev/disk"}])])
    cluster_api.wait_phase("reader", "Succeeded")
    assert cluster_kubectl("logs", "reader").stdout.split()[0] == hashlib.sha256(block_data).hexdigest()


@pytest.mark.root
def test_filesystem_volume_has_real_free_space(localkube_cluster: Cluster, cluster_api: ClusterAPI,
                                               cluster_kubectl: Any) -> None:
    """The importer sizes its writes from statvfs, so the volume must report its own size, not the host's."""
    cluster_kubectl("create", "-f", "-", objects=[
        pvc_manifest("fs", size="16Mi"),
        pod_manifest("df", "stat -f -c '%b %S' /data", volumes=[claim_volume("d", "fs")],
                     volumeMounts=[{"name": "d", "mountPath": "/data"}])])
    cluster_api.wait_phase("df", "Succeeded")
    blocks, block_size = map(int, cluster_kubectl("logs", "df").stdout.split())
    assert 12 * 2**20 < blocks * block_size <= 16 * 2**20


@pytest.mark.root
def test_wait_for_first_consumer_binds_when_a_pod_is_scheduled(localkube_cluster: Cluster,
                                                              cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    cluster_kubectl("create", "-f", "-", objects=[pvc_manifest("late", storage_class="local-wffc")])
    wait_for(lambda: any(e["reason"] == "WaitForFirstConsumer" and e["involvedObject"]["name"] == "late"
                         for e in cluster_api.events()), what="WaitForFirstConsumer event")
    pvc = cluster_api.get(f"{NS}/persistentvolumeclaims/late")
    assert pvc is not None and pvc["status"]["phase"] == "Pending" and not pvc["spec"].get("volumeName")
    assert cluster_api.get("/api/v1/persistentvolumes")["items"] == []  # type: ignore[index]

    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "consumer", "ls /data", volumes=[claim_volume("d", "late")],
        volumeMounts=[{"name": "d", "mountPath": "/data"}])])
    pod = cluster_api.wait_phase("consumer", "Succeeded", "Failed")
    assert pod["status"]["phase"] == "Succeeded" and pod["spec"]["nodeName"] == "localkube"
    pvc = cluster_api.get(f"{NS}/persistentvolumeclaims/late")
    assert pvc is not None and pvc["status"]["phase"] == "Bound"
    assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "localkube"
    assert pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    pv = cluster_api.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
    assert pv is not None and pv["status"]["phase"] == "Bound"
    assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    reasons = [e["reason"] for e in cluster_api.events() if e["involvedObject"]["name"] == "late"]
    assert sorted(reasons) == ["ProvisioningSucceeded", "WaitForFirstConsumer"]  # each said once


@pytest.mark.root
def test_deleting_a_claim_removes_volume_mount_loop_device_and_file(localkube_cluster: Cluster,
                                                                    cluster_api: ClusterAPI,
                                                                    cluster_kubectl: Any) -> None:
    cluster_kubectl("create", "-f", "-", objects=[pvc_manifest("fs"), pvc_manifest("blk", mode="Block")])
    pvs = [bound_pv(cluster_api, "fs"), bound_pv(cluster_api, "blk")]
    mount_dir = Path(pvs[0]["spec"]["hostPath"]["path"])
    device = pvs[1]["spec"]["hostPath"]["path"]
    wait_for(lambda: str(mount_dir) in Path("/proc/self/mountinfo").read_text(), what="ext4 mounted after Bound")
    assert str(backing_file(pvs[1])) in subprocess.run(["losetup", device], capture_output=True, text=True).stdout

    cluster_kubectl("delete", "pvc", "fs", "blk")
    for pv in pvs:
        wait_for(lambda: cluster_api.get(f"/api/v1/persistentvolumes/{pv['metadata']['name']}") is None,
                 what="PV deleted")
        wait_for(lambda: not backing_file(pv).exists(), what="backing file removed")
    assert str(mount_dir) not in Path("/proc/self/mountinfo").read_text()
    assert not mount_dir.exists()
    attached = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(localkube_cluster.workdir) not in attached


@pytest.mark.root
def test_claim_without_size_fails_provisioning_with_a_reason(localkube_cluster: Cluster,
                                                              cluster_api: ClusterAPI) -> None:
    claim = pvc_manifest("nosize")
    claim["spec"]["resources"]["requests"] = {"storage": "lots"}
    cluster_api.create(f"{NS}/persistentvolumeclaims", claim)
    event = wait_for(lambda: next((e for e in cluster_api.events() if e["reason"] == "ProvisioningFailed"), None),
                     what="ProvisioningFailed event")
    assert "invalid quantity 'lots'" in event["message"] and event["type"] == "Warning"


@pytest.mark.parametrize(("text", "size"), [("4Mi", 4 << 20), ("1G", 10**9), ("1.5Ki", 1536), ("1e3", 1000),
                                            ("100", 100), ("0.1", 1)])
def test_quantities_are_whole_bytes_rounded_up(text: str, size: int) -> None:
    assert parse_quantity(text) == size


@pytest.mark.parametrize("text", ["lots", "1Zi", "", "1.2.3Mi"])
def test_bad_quantities_say_why(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)



@pytest.mark.root
def test_running_pods_do_not_hold_loop_mounts_of_others(tmp_path: Path, localkube_cluster: Cluster,
                                                        cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    """A pod's mount namespace starts as a copy of the host's mounts. It must not keep a loop filesystem that
    someone else mounted (another test, another cluster) busy, or its owner could not detach it."""
    image, mount_point = tmp_path / "foreign.img", tmp_path / "foreign"
    mount_point.mkdir()
    with image.open("wb") as f:
        f.truncate(4 << 20)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    device = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True,
                            check=True).stdout.strip()
    try:
        subprocess.run(["mount", device, str(mount_point)], check=True)
        cluster_kubectl("create", "-f", "-", objects=[pod_manifest("holder", "sleep 1000", restart="Always")])
        cluster_api.wait_phase("holder", "Running")
        subprocess.run(["umount", str(mount_point)], check=True)
        subprocess.run(["losetup", "-d", device], check=True)
        # Detached at once: nothing holds the device, although the pod still runs.
        assert str(image) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    finally:
        subprocess.run(["umount", str(mount_point)], capture_output=True, check=False)
        subprocess.run(["losetup", "-d", device], capture_output=True, check=False)


@pytest.mark.root
def test_populator_claims_wait_and_a_moved_claim_ref_binds_the_target(localkube_cluster: Cluster,
                                                                      cluster_api: ClusterAPI,
                                                                      cluster_kubectl: Any) -> None:
    """How volume populators (CDI's among them) hand over a volume: the target claim names a populator's
    source and is not provisioned; a helper claim gets the volume; moving the PV's claimRef to the target
    binds the target, and deleting the helper leaves the volume alone."""
    target = pvc_manifest("target")
    target["spec"]["dataSourceRef"] = {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeImportSource", "name": "src"}
    cluster_kubectl("create", "-f", "-", objects=[target, pvc_manifest("prime")])
    pv = bound_pv(cluster_api, "prime")
    waiting = wait_for(lambda: (lambda c: c if c and c["metadata"].get("annotations", {}).get(
        "volume.kubernetes.io/storage-provisioner") else None)(cluster_api.get(f"{NS}/persistentvolumeclaims/target")),
        what="target marked for the provisioner")
    assert waiting["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"] == "localkube.dev/local"
    assert waiting["status"]["phase"] == "Pending" and not waiting["spec"].get("volumeName")

    claim_ref = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "default", "name": "target",
                 "uid": waiting["metadata"]["uid"]}
    cluster_kubectl("patch", "pv", pv["metadata"]["name"], "--type=merge", "-p",
                    json.dumps({"spec": {"claimRef": claim_ref}}))
    assert bound_pv(cluster_api, "target")["metadata"]["name"] == pv["metadata"]["name"]
    cluster_kubectl("delete", "pvc", "prime")
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "user", "echo ok > /data/x", volumes=[claim_volume("d", "target")],
        volumeMounts=[{"name": "d", "mountPath": "/data"}])])
    assert cluster_api.wait_phase("user", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    assert cluster_api.get(f"/api/v1/persistentvolumes/{pv['metadata']['name']}") is not None
    assert backing_file(pv).exists()


@pytest.mark.root
def test_a_claim_is_bound_while_its_filesystem_is_made_and_pods_wait_for_it(
        localkube_cluster: Cluster, cluster_api: ClusterAPI, cluster_kubectl: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """mkfs runs after the claim is Bound, while its pod is made and scheduled; a pod that gets there first must
    write into the new filesystem, not into the directory it is about to be mounted on. mkfs is too quick to
    catch in between, so a delay is added to it here (the one fake in this file)."""
    real = hostvolumes.make_ext4

    async def slow(device: str) -> None:
        await asyncio.sleep(1)
        await real(device)

    monkeypatch.setattr(hostvolumes, "make_ext4", slow)
    cluster_kubectl("create", "-f", "-", objects=[pvc_manifest("slow"), pod_manifest(
        "early", "echo early > /data/x", volumes=[claim_volume("d", "slow")],
        volumeMounts=[{"name": "d", "mountPath": "/data"}])])
    mount_dir = Path(bound_pv(cluster_api, "slow")["spec"]["hostPath"]["path"])
    assert not os.path.ismount(mount_dir)  # Bound, its filesystem still on its way
    assert cluster_api.wait_phase("early", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    assert os.path.ismount(mount_dir) and (mount_dir / "x").read_text() == "early\n"


@pytest.mark.root
def test_a_filesystem_that_cannot_be_made_is_said_on_the_claim_and_the_pod(
        localkube_cluster: Cluster, cluster_api: ClusterAPI, cluster_kubectl: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing mkfs (injected: a real one does not fail on a fresh loop device) leaves the pod Pending with
    FailedMount, never running on the bare directory; deleting the claim still cleans up."""
    async def failing(device: str) -> None:
        raise hostvolumes.HostError(f"mkfs.ext4 {device} failed (1): injected")

    monkeypatch.setattr(hostvolumes, "make_ext4", failing)
    cluster_kubectl("create", "-f", "-", objects=[pvc_manifest("broken"), pod_manifest(
        "waits", "echo ran > /data/x", volumes=[claim_volume("d", "broken")],
        volumeMounts=[{"name": "d", "mountPath": "/data"}])])
    pv = bound_pv(cluster_api, "broken")

    def said(reason: str, name: str) -> str | None:
        return next((e["message"] for e in cluster_api.events()
                     if e["reason"] == reason and e["involvedObject"]["name"] == name), None)

    assert "injected" in wait_for(lambda: said("ProvisioningFailed", "broken"), what="ProvisioningFailed")
    assert "its filesystem could not be made" in wait_for(lambda: said("FailedMount", "waits"), what="FailedMount")
    assert cluster_api.pod("waits")["status"]["phase"] == "Pending"
    cluster_kubectl("delete", "pod", "waits", "--grace-period=0")
    cluster_kubectl("delete", "pvc", "broken")
    wait_for(lambda: not backing_file(pv).exists(), what="backing file removed")
    assert not Path(pv["spec"]["hostPath"]["path"]).exists()
