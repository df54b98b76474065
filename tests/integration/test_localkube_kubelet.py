"""The localkube kubelet: pods as real processes, with restarts, exit codes, termination messages, env,
volumes, init containers, readiness, logs through kubectl, and deletion by users and the garbage collector."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from localkube.cluster import Cluster
from tests.fixtures.localkube_cluster import ClusterAPI, claim_volume, pod_manifest, pvc_manifest, wait_for

pytestmark = pytest.mark.root

NS = "/api/v1/namespaces/default"


def status_of(pod: dict[str, Any], container: str = "c") -> dict[str, Any]:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == container)


def pid_of(pod: dict[str, Any]) -> int:
    return int(status_of(pod)["containerID"].removeprefix("localkube://"))


def test_on_failure_restarts_with_growing_restart_count_until_success(cluster_api: ClusterAPI,
                                                                     cluster_kubectl: Any) -> None:
    # Fails twice, then succeeds: the count survives restarts in an emptyDir, as it would in Kubernetes.
    script = "n=$(cat /state/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /state/n; echo try $n; [ $n -ge 3 ]"
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "flaky", script, restart="OnFailure", volumes=[{"name": "s", "emptyDir": {}}],
        volumeMounts=[{"name": "s", "mountPath": "/state"}])])
    seen = []
    pod = cluster_api.wait_pod("flaky", lambda p: bool(seen.append(status_of(p)["restartCount"])
                                                      if p["status"].get("containerStatuses") else None)
                               or p["status"]["phase"] == "Succeeded", what="succeeded")
    status = status_of(pod)
    assert status["restartCount"] == 2
    assert sorted(seen) == seen and seen[-1] == 2
    assert status["state"]["terminated"]["exitCode"] == 0 and status["state"]["terminated"]["reason"] == "Completed"
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert cluster_kubectl("logs", "flaky").stdout == "try 3\n"
    assert cluster_kubectl("logs", "flaky", "--previous").stdout == "try 2\n"


def test_always_keeps_restarting_with_back_off(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest("crashy", "exit 2", restart="Always")])
    pod = cluster_api.wait_pod("crashy", lambda p: bool(p["status"].get("containerStatuses"))
                               and status_of(p)["restartCount"] >= 3, what="3 restarts")
    assert pod["status"]["phase"] == "Running"
    assert status_of(pod)["lastState"]["terminated"]["exitCode"] == 2
    pod = cluster_api.wait_pod("crashy", lambda p: "waiting" in status_of(p)["state"], what="back-off")
    assert status_of(pod)["state"]["waiting"]["reason"] == "CrashLoopBackOff"


def test_exit_code_and_termination_message_reach_container_status(cluster_api: ClusterAPI,
                                                                 cluster_kubectl: Any) -> None:
    cluster_kubectl("create", "-f", "-", objects=[
        pod_manifest("custom", "echo 'Import Complete' > /tmp-msg/done; exit 7",
                     terminationMessagePath="/tmp-msg/done"),
        pod_manifest("fallback", "echo first; echo 'last words'; exit 1",
                     terminationMessagePolicy="FallbackToLogsOnError"),
        pod_manifest("file-wins", "echo log; echo from-file > /dev/termination-log; exit 1",
                     terminationMessagePolicy="FallbackToLogsOnError"),
    ])
    custom = status_of(cluster_api.wait_phase("custom", "Failed"))["state"]["terminated"]
    assert (custom["exitCode"], custom["reason"], custom["message"]) == (7, "Error", "Import Complete\n")
    fallback = status_of(cluster_api.wait_phase("fallback", "Failed"))["state"]["terminated"]
    assert fallback["message"] == "first\nlast words\n"
    assert status_of(cluster_api.wait_phase("file-wins", "Failed"))["state"]["terminated"]["message"] == "from-file\n"


def test_environment_volumes_and_working_dir(localkube_cluster: Cluster, cluster_api: ClusterAPI,
                                             cluster_kubectl: Any) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
              "data": {"accessKeyId": base64.b64encode(b"AKIA-test").decode()}}
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
              "data": {"mode": "fast", "ca.pem": "-----CERT-----"}}
    env = [
        {"name": "PLAIN", "value": "v-$(MODE)"},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "accessKeyId"}}},
        {"name": "ABSENT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": True}}},
        *({"name": name, "valueFrom": {"fieldRef": {"fieldPath": field}}} for name, field in [
            ("POD", "metadata.name"), ("NS", "metadata.namespace"), ("UID", "metadata.uid"),
            ("IP", "status.podIP"), ("NODE", "spec.nodeName")]),
    ]
    script = ("echo $PLAIN $MODE $KEY ${ABSENT-unset} $POD $NS $UID $IP $NODE; pwd; cat /certs/ca.pem; echo; "
              "cat /secret/id; echo; touch /certs/x 2>/dev/null || echo read-only")
    cluster_kubectl("create", "-f", "-", objects=[secret, config, pod_manifest(
        "envy", script, env=env, workingDir="/work-here",
        volumes=[{"name": "cm", "configMap": {"name": "settings"}},
                 {"name": "sec", "secret": {"secretName": "creds", "items": [{"key": "accessKeyId", "path": "id"}]}}],
        volumeMounts=[{"name": "cm", "mountPath": "/certs", "readOnly": True},
                      {"name": "sec", "mountPath": "/secret"}])])
    pod = cluster_api.wait_phase("envy", "Succeeded", "Failed")
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    ip = pod["status"]["podIP"]
    assert ip.startswith("127.") and ip != "127.0.0.1" and pod["status"]["podIPs"] == [{"ip": ip}]
    assert pod["status"]["hostIP"] == "127.0.0.1"
    lines = cluster_kubectl("logs", "envy").stdout.splitlines()
    assert lines == [f"v-$(MODE) fast AKIA-test unset envy default {pod['metadata']['uid']} {ip} localkube",
                     "/work-here", "-----CERT-----", "AKIA-test", "read-only"]
    # The container's mount points live in its own namespace, never on the host.
    assert not Path("/certs").exists() and not Path("/work-here").exists()


def test_missing_secret_waits_with_a_reason_then_runs(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    env = [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "later", "key": "k"}}}]
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest("patient", "echo $KEY", env=env)])
    pod = cluster_api.wait_pod("patient", lambda p: bool(p["status"].get("containerStatuses"))
                               and "waiting" in status_of(p)["state"]
                               and status_of(p)["state"]["waiting"]["reason"] == "CreateContainerConfigError",
                               what="config error")
    assert status_of(pod)["state"]["waiting"]["message"] == 'secret "later" not found'
    cluster_kubectl("create", "secret", "generic", "later", "--from-literal=k=now")
    cluster_api.wait_phase("patient", "Succeeded")
    assert cluster_kubectl("logs", "patient").stdout == "now\n"


def test_init_containers_run_first_in_order(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    pod = pod_manifest("ordered", "cat /shared/order", volumes=[{"name": "s", "emptyDir": {}}],
                       volumeMounts=[{"name": "s", "mountPath": "/shared"}])
    pod["spec"]["initContainers"] = [
        {"name": f"init{i}", "image": "busybox", "command": ["sh", "-c", f"echo -n {i} >> /shared/order"],
         "volumeMounts": [{"name": "s", "mountPath": "/shared"}]} for i in (1, 2)]
    cluster_kubectl("create", "-f", "-", objects=[pod])
    done = cluster_api.wait_phase("ordered", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert [s["state"]["terminated"]["exitCode"] for s in done["status"]["initContainerStatuses"]] == [0, 0]
    assert cluster_kubectl("logs", "ordered").stdout == "12"
    assert cluster_kubectl("logs", "ordered", "-c", "init2").stdout == ""


def test_failed_init_container_fails_a_never_restart_pod(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    pod = pod_manifest("blocked", "echo never runs")
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox", "command": ["sh", "-c", "exit 4"]}]
    cluster_kubectl("create", "-f", "-", objects=[pod])
    done = cluster_api.wait_phase("blocked", "Failed")
    assert done["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 4
    assert "terminated" not in status_of(done)["state"]


def test_mapped_image_runs_its_entry_point_and_unmapped_image_needs_a_command(cluster_api: ClusterAPI,
                                                                            cluster_kubectl: Any) -> None:
    mapped = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mapped"}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "quay.io/example/localkube-test-tool:v1.2", "args": ["-v=1"]}]}}
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "quay.io/example/unknown:v1"}]}}
    missing = pod_manifest("missing", "unused")
    missing["spec"]["containers"][0]["command"] = ["no-such-program-here"]
    cluster_kubectl("create", "-f", "-", objects=[mapped, bare, missing])
    cluster_api.wait_phase("mapped", "Succeeded")
    assert cluster_kubectl("logs", "mapped").stdout == "tool -v=1\n"
    bare_state = status_of(cluster_api.wait_phase("bare", "Failed"))["state"]["terminated"]
    assert bare_state["reason"] == "ContainerCannotRun"
    assert "'quay.io/example/unknown:v1' is not mapped to a local entry point" in bare_state["message"]
    missing_state = status_of(cluster_api.wait_phase("missing", "Failed"))["state"]["terminated"]
    assert missing_state["reason"] == "StartError"
    assert missing_state["message"] == "cannot run 'no-such-program-here': No such file or directory"


def test_readiness_probe_against_the_pod_ip(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    serve = f"mkdir -p /www/ok && cd /www && exec {sys.executable} -m http.server --bind $IP 8080"
    probe = {"httpGet": {"path": "/ok/", "port": "web"}, "periodSeconds": 1}
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "web", serve, restart="Always", readinessProbe=probe, ports=[{"name": "web", "containerPort": 8080}],
        env=[{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}])])
    cluster_kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=30s")
    pod = cluster_api.pod("web")
    assert status_of(pod)["ready"] is True
    assert requests.get(f"http://{pod['status']['podIP']}:8080/ok/", timeout=5).status_code == 200


def test_kubectl_logs_tail_and_follow(tmp_path: Path, cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    script = "for i in 1 2 3; do echo line $i; done; while [ ! -e /ctl/stop ]; do sleep 0.1; done; echo bye"
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "talker", script, volumes=[{"name": "ctl", "hostPath": {"path": str(tmp_path)}}],
        volumeMounts=[{"name": "ctl", "mountPath": "/ctl"}])])
    cluster_api.wait_pod("talker", lambda p: p["status"]["phase"] == "Running", what="running")
    wait_for(lambda: cluster_kubectl("logs", "talker").stdout.count("line") == 3, what="three lines")
    assert cluster_kubectl("logs", "talker", "--tail=1").stdout == "line 3\n"
    follower = subprocess.Popen([cluster_kubectl.binary, "logs", "-f", "talker"], stdout=subprocess.PIPE,
                                text=True, env=cluster_kubectl.env)
    try:
        assert follower.stdout is not None
        assert [follower.stdout.readline() for _ in range(3)] == ["line 1\n", "line 2\n", "line 3\n"]
        (tmp_path / "stop").touch()
        assert follower.stdout.read() == "bye\n"  # the stream ends when the container does
        assert follower.wait(timeout=30) == 0
    finally:
        follower.kill()
        follower.wait()


def test_deleted_pod_gets_sigterm_then_its_object_is_gone(tmp_path: Path, cluster_api: ClusterAPI,
                                                           cluster_kubectl: Any) -> None:
    out = tmp_path / "out"
    out.mkdir()
    script = "trap 'echo terminated > /out/signal; exit 0' TERM; echo up > /out/signal; while :; do sleep 0.1; done"
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "graceful", script, restart="Always", volumes=[{"name": "o", "hostPath": {"path": str(out)}}],
        volumeMounts=[{"name": "o", "mountPath": "/out"}])])
    wait_for(lambda: (out / "signal").exists(), what="pod up")
    pid = pid_of(cluster_api.pod("graceful"))
    cluster_kubectl("delete", "pod", "graceful", "--wait=false")
    wait_for(lambda: (out / "signal").read_text() == "terminated\n", what="SIGTERM handled")
    wait_for(lambda: not _alive(pid), what="process gone")
    assert cluster_api.get(f"{NS}/pods/graceful") is None


def test_garbage_collected_children_are_stopped(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    owner = cluster_api.create(f"{NS}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                    "metadata": {"name": "owner"}})
    children = []
    for name in ("child-a", "child-b"):
        child = pod_manifest(name, "sleep 1000", restart="Always")
        child["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                                 "uid": owner["metadata"]["uid"]}]
        children.append(child)
    cluster_kubectl("create", "-f", "-", objects=children)
    pids = [pid_of(cluster_api.wait_pod(c["metadata"]["name"], lambda p: p["status"]["phase"] == "Running",
                                        what="running")) for c in children]
    assert all(_alive(pid) for pid in pids)
    cluster_kubectl("delete", "configmap", "owner")
    for name in ("child-a", "child-b"):
        wait_for(lambda: cluster_api.get(f"{NS}/pods/{name}") is None, what=f"{name} collected")
    for pid in pids:
        wait_for(lambda: not _alive(pid), what=f"process {pid} stopped")


def test_pod_waits_for_its_claim_to_exist(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "early", "cat /data/lost+found >/dev/null 2>&1; ls -d /data", volumes=[claim_volume("d", "later")],
        volumeMounts=[{"name": "d", "mountPath": "/data"}])])
    pod = cluster_api.wait_pod("early", lambda p: any(c["type"] == "PodScheduled" and c["status"] == "False"
                                                      for c in p["status"].get("conditions", [])),
                               what="unschedulable")
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == 'persistentvolumeclaim "later" not found'
    assert not pod["spec"].get("nodeName")
    cluster_kubectl("create", "-f", "-", objects=[pvc_manifest("later")])
    assert cluster_api.wait_phase("early", "Succeeded")["spec"]["nodeName"] == "localkube"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0; it has exited all the same.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"



def test_pod_with_finalizer_is_stopped_and_deleted_once_released(cluster_api: ClusterAPI,
                                                                 cluster_kubectl: Any) -> None:
    pod = pod_manifest("held", "trap 'exit 0' TERM; while :; do sleep 0.1; done", restart="Always")
    pod["metadata"]["finalizers"] = ["example.com/hold"]
    cluster_kubectl("create", "-f", "-", objects=[pod])
    pid = pid_of(cluster_api.wait_phase("held", "Running"))
    assert any(e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "held" for e in cluster_api.events())
    cluster_kubectl("delete", "pod", "held", "--wait=false")
    stopped = cluster_api.wait_pod("held", lambda p: "terminated" in status_of(p)["state"], what="stopped")
    assert stopped["metadata"]["deletionTimestamp"]
    # The grace period is the pod's deletionGracePeriodSeconds (0 from this API server: SIGKILL at once).
    assert status_of(stopped)["state"]["terminated"]["exitCode"] in (0, 137)
    wait_for(lambda: not _alive(pid), what="process gone")
    cluster_kubectl("patch", "pod", "held", "--type=json", "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
    wait_for(lambda: cluster_api.get(f"{NS}/pods/held") is None, what="pod removed")


def test_missing_volume_source_is_one_failed_mount_event_then_runs(cluster_api: ClusterAPI,
                                                                  cluster_kubectl: Any) -> None:
    cluster_kubectl("create", "-f", "-", objects=[pod_manifest(
        "mounting", "cat /cfg/k", volumes=[{"name": "cfg", "configMap": {"name": "later"}}],
        volumeMounts=[{"name": "cfg", "mountPath": "/cfg"}])])
    event = wait_for(lambda: next((e for e in cluster_api.events() if e["reason"] == "FailedMount"), None),
                     what="FailedMount event")
    assert event["message"] == 'MountVolume.SetUp failed: configmap "later" not found'
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "mounting"
    assert cluster_api.pod("mounting")["status"]["phase"] == "Pending"
    cluster_kubectl("create", "configmap", "later", "--from-literal=k=v")
    cluster_api.wait_phase("mounting", "Succeeded")
    assert cluster_kubectl("logs", "mounting").stdout == "v"
    assert [e["reason"] for e in cluster_api.events()].count("FailedMount") == 1


def test_pod_larger_than_a_watch_line_buffer_runs(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    """Watch events arrive one JSON line per object; a pod of 100 KiB must not stop the kubelet's watch."""
    big = pod_manifest("big", "echo ran")
    big["metadata"]["annotations"] = {"example.com/blob": "x" * (100 * 1024)}
    cluster_kubectl("create", "-f", "-", objects=[big, pod_manifest("after", "echo ran too")])
    cluster_api.wait_phase("big", "Succeeded")
    cluster_api.wait_phase("after", "Succeeded")


def test_logs_errors_as_kubectl_reports_them(cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    pair = pod_manifest("pair", "echo one")
    pair["spec"]["containers"].append({"name": "d", "image": "busybox", "command": ["sh", "-c", "echo two"]})
    cluster_kubectl("create", "-f", "-", objects=[pair])
    cluster_api.wait_phase("pair", "Succeeded")
    assert cluster_kubectl("logs", "pair", "-c", "d").stdout == "two\n"
    unnamed = cluster_kubectl("logs", "pair")  # kubectl picks the first container itself ...
    assert unnamed.stdout == "one\n"
    asked = requests.get(f"{cluster_api.url}{NS}/pods/pair/log", timeout=10)  # ... the API does not
    assert asked.status_code == 400
    assert asked.json()["message"] == "a container name must be specified for pod pair, choose one of: [c d]"
    previous = cluster_kubectl("logs", "pair", "-c", "c", "--previous", check=False)
    assert previous.returncode == 1
    assert 'previous terminated container "c" in pod "pair" not found' in previous.stderr
    wrong = cluster_kubectl("logs", "pair", "-c", "nope", check=False)
    assert wrong.returncode == 1 and "container nope is not valid for pod pair" in wrong.stderr
