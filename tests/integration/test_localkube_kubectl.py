"""The real kubectl against localkube's API server: what a user types, and what they see."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support.localkube_objects import GROUP, WIDGET_CRD, manifest, widget


@pytest.fixture
def widgets(kubectl):
    kubectl("apply", "-f", "-", stdin=manifest(WIDGET_CRD))
    kubectl("wait", "--for=condition=Established", f"crd/widgets.{GROUP}", "--timeout=20s")
    return kubectl


def get_json(kubectl, *what: str) -> dict:
    return json.loads(kubectl("get", *what, "-o", "json").stdout)


def test_apply_twice_with_a_change_then_get_prints_the_crd_columns(widgets):
    first = widgets("apply", "-f", "-", stdin=manifest(widget("w1", size=2)))
    assert first.stdout.strip() == f"widget.{GROUP}/w1 created"
    again = widgets("apply", "-f", "-", stdin=manifest(widget("w1", size=2)))
    assert again.stdout.strip() == f"widget.{GROUP}/w1 unchanged"
    changed = widgets("apply", "-f", "-", stdin=manifest(widget("w1", size=5, color="blue")))
    assert changed.stdout.strip() == f"widget.{GROUP}/w1 configured"

    obj = get_json(widgets, "widget", "w1")
    assert obj["spec"] == {"size": 5, "color": "blue"}
    assert obj["metadata"]["generation"] == 2
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]

    lines = widgets("get", "wg").stdout.splitlines()  # by short name, as a Table
    assert lines[0].split() == ["NAME", "SIZE", "COLOR", "PHASE", "AGE"]
    assert lines[1].split()[:3] == ["w1", "5", "blue"]
    assert "w1" in widgets("get", "gadgets").stdout  # by category


def test_create_from_a_list_and_defaults_from_the_schema(widgets):
    done = widgets("create", "-f", "-", stdin=manifest(widget("a"), widget("b", size=3)))
    assert done.stdout.split("\n")[:2] == [f"widget.{GROUP}/a created", f"widget.{GROUP}/b created"]
    assert get_json(widgets, "widget", "a")["spec"]["color"] == "red"  # schema default
    names = widgets("get", "widgets", "-o", "name").stdout.split()
    assert names == [f"widget.{GROUP}/a", f"widget.{GROUP}/b"]


def test_schema_violations_are_422_with_every_field_path(widgets):
    bad = widget("bad", color="purple", code="ABCD")
    del bad["spec"]["size"]
    done = widgets("create", "-f", "-", stdin=manifest(bad), check=False)
    assert done.returncode == 1
    assert 'The Widget "bad" is invalid' in done.stderr  # kubectl's wording of a 422 with causes
    assert 'spec.color: Unsupported value: "purple": supported values: "red", "green", "blue"' in done.stderr
    assert "spec.code: Invalid value: \"ABCD\": spec.code in body should match '^[a-z]{3}$'" in done.stderr
    assert "spec.size: Required value" in done.stderr
    wrong_type = widgets("create", "-f", "-", stdin=manifest(widget("t", size="big")), check=False)
    assert "spec.size: Invalid value: \"string\": spec.size in body must be of type integer" in wrong_type.stderr
    assert widgets("get", "widgets", "-o", "name").stdout == ""


def test_unknown_fields_are_refused_when_strict_and_pruned_otherwise(widgets):
    sloppy = widget("s", size=1, typo=True, extra={"free": {"form": 1}})
    strict = widgets("create", "-f", "-", stdin=manifest(sloppy), check=False)
    assert strict.returncode == 1 and 'unknown field "spec.typo"' in strict.stderr
    widgets("create", "--validate=false", "-f", "-", stdin=manifest(sloppy))
    assert get_json(widgets, "widget", "s")["spec"] == {"size": 1, "color": "red", "extra": {"free": {"form": 1}}}


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "x"}},
       "spec": {"containers": [{"name": "main", "image": "busybox", "env": [{"name": "A", "value": "1"}]},
                               {"name": "side", "image": "busybox"}]}}


def test_patch_merge_json_and_strategic(kubectl):
    kubectl("create", "-f", "-", stdin=manifest(POD))
    kubectl("patch", "pod", "p", "--type", "merge", "-p", '{"metadata":{"labels":{"tier":"db","app":null}}}')
    assert get_json(kubectl, "pod", "p")["metadata"]["labels"] == {"tier": "db"}

    kubectl("patch", "pod", "p", "--type", "json", "-p",
            '[{"op":"add","path":"/metadata/annotations","value":{"k":"v"}},'
            '{"op":"replace","path":"/spec/containers/1/image","value":"alpine"}]')
    pod = get_json(kubectl, "pod", "p")
    assert pod["metadata"]["annotations"] == {"k": "v"}
    assert pod["spec"]["containers"][1]["image"] == "alpine"

    # Strategic merge: containers and env merge by name instead of being replaced.
    kubectl("patch", "pod", "p", "-p",
            '{"spec":{"containers":[{"name":"main","env":[{"name":"B","value":"2"}]}]}}')
    containers = get_json(kubectl, "pod", "p")["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "side"]
    assert containers[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]

    failed = kubectl("patch", "pod", "p", "--type", "json", "-p",
                     '[{"op":"test","path":"/metadata/name","value":"other"}]', check=False)
    assert failed.returncode == 1 and "testing value /metadata/name failed" in failed.stderr


def test_status_subresource_is_isolated_from_spec(widgets):
    widgets("create", "-f", "-", stdin=manifest(widget("w", size=2)))
    widgets("patch", "widget", "w", "--type", "merge", "-p", '{"spec":{"size":3},"status":{"phase":"Ignored"}}')
    obj = get_json(widgets, "widget", "w")
    assert obj["spec"]["size"] == 3 and "status" not in obj
    widgets("patch", "widget", "w", "--subresource=status", "--type", "merge",
            "-p", '{"spec":{"size":9},"status":{"phase":"Done"}}')
    obj = get_json(widgets, "widget", "w")
    assert obj["spec"]["size"] == 3 and obj["status"] == {"phase": "Done"}
    assert obj["metadata"]["generation"] == 2  # the spec change only
    assert widgets("get", "widget", "w").stdout.splitlines()[1].split()[:4] == ["w", "3", "red", "Done"]


def test_get_watch_prints_new_objects(widgets):
    widgets("create", "-f", "-", stdin=manifest(widget("before")))
    watch = subprocess.Popen([widgets.binary, "get", "widgets", "-w", "--output-watch-events"],
                             env=widgets.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        header = watch.stdout.readline().split()
        assert header[:3] == ["EVENT", "NAME", "SIZE"]
        assert watch.stdout.readline().split()[:2] == ["ADDED", "before"]
        widgets("create", "-f", "-", stdin=manifest(widget("after", size=7)))
        assert watch.stdout.readline().split()[:3] == ["ADDED", "after", "7"]
        widgets("delete", "widget", "before")
        assert watch.stdout.readline().split()[:2] == ["DELETED", "before"]
    finally:
        watch.kill()
        watch.communicate()


def test_wait_for_condition_and_jsonpath(widgets):
    widgets("create", "-f", "-", stdin=manifest(widget("w")))
    waiters = [subprocess.Popen([widgets.binary, "wait", *args, "widget/w", "--timeout=30s"], env=widgets.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for args in (["--for=condition=Ready"], ["--for=jsonpath={.status.phase}=Done"])]
    try:
        widgets("patch", "widget", "w", "--subresource=status", "--type", "merge",
                "-p", '{"status":{"phase":"Done","conditions":[{"type":"Ready","status":"True"}]}}')
        results = [w.communicate(timeout=40) for w in waiters]
    finally:
        for w in waiters:
            w.kill()
    assert [w.returncode for w in waiters] == [0, 0], results
    assert results[0][0].strip() == f"widget.{GROUP}/w condition met"


def test_describe_shows_the_object_and_its_events(widgets):
    obj = json.loads(widgets("create", "-f", "-", "-o", "json", stdin=manifest(widget("w", size=4))).stdout)
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "w.1"}, "type": "Normal",
             "reason": "Polished", "message": "the widget shines",
             "involvedObject": {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "name": "w", "namespace": "default",
                                "uid": obj["metadata"]["uid"]},
             "source": {"component": "test"}, "count": 1}
    widgets("create", "-f", "-", stdin=manifest(event))
    described = widgets("describe", "widget", "w").stdout
    assert "Name:         w" in described
    assert re.search(r"^\s+Size:\s+4$", described, re.MULTILINE)
    assert "Polished" in described and "the widget shines" in described


def _owned_configmap(name: str, owner: dict, *, block: bool) -> dict:
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
           "uid": owner["metadata"]["uid"], "blockOwnerDeletion": block}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": [ref]},
            "data": {"k": "v"}}


@pytest.mark.parametrize("cascade", ["background", "foreground", "orphan"])
def test_delete_with_cascade(widgets, cascade):
    owner = json.loads(widgets("create", "-f", "-", "-o", "json", stdin=manifest(widget("owner"))).stdout)
    widgets("create", "-f", "-", stdin=manifest(_owned_configmap("child", owner, block=True)))
    done = widgets("delete", "widget", "owner", f"--cascade={cascade}")
    assert done.stdout.strip() == f'widget.{GROUP} "owner" deleted from default namespace'
    assert widgets("get", "widget", "owner", check=False).returncode == 1
    left = widgets("get", "configmap", "child", "-o", "json", check=False)
    if cascade == "orphan":
        assert "ownerReferences" not in json.loads(left.stdout)["metadata"]
    else:
        assert left.returncode == 1 and 'configmaps "child" not found' in left.stderr


def test_server_side_apply(kubectl):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}}
    assert kubectl("apply", "--server-side", "-f", "-", stdin=manifest(cm)).stdout.strip() == \
        "configmap/ssa serverside-applied"
    cm["data"]["b"] = "2"
    kubectl("apply", "--server-side", "-f", "-", stdin=manifest(cm))
    assert get_json(kubectl, "configmap", "ssa")["data"] == {"a": "1", "b": "2"}


def _configmap(name: str, namespace: str = "default") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {"k": "v"}}


def test_namespace_deletion_takes_its_objects(kubectl):
    kubectl("create", "-f", "-", stdin=manifest({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "doomed"}},
                                               _configmap("c", namespace="doomed")))
    kubectl("delete", "namespace", "doomed", "--timeout=30s")
    assert kubectl("get", "namespace", "doomed", check=False).returncode == 1
    assert kubectl("get", "configmaps", "-A", "-o", "name").stdout == ""
    refused = kubectl("create", "-f", "-", stdin=manifest(_configmap("c", namespace="missing")), check=False)
    assert 'namespaces "missing" not found' in refused.stderr


def test_errors_are_kubernetes_statuses(kubectl):
    missing = kubectl("get", "pod", "nope", check=False)
    assert missing.returncode == 1 and 'pods "nope" not found' in missing.stderr
    kubectl("create", "-f", "-", stdin=manifest(_configmap("c")))
    again = kubectl("create", "-f", "-", stdin=manifest(_configmap("c")), check=False)
    assert 'configmaps "c" already exists' in again.stderr
    bad_name = kubectl("create", "-f", "-", stdin=manifest(_configmap("Not_A_Name")), check=False)
    assert 'metadata.name: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain' in bad_name.stderr
    named = kubectl("create", "-f", "-", "-o", "name",
                    stdin=manifest({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}}))
    assert named.stdout.startswith("configmap/gen-") and len(named.stdout.strip()) == len("configmap/gen-") + 5


def test_server_dry_run_stores_nothing(widgets):
    done = widgets("create", "--dry-run=server", "-f", "-", stdin=manifest(widget("dry", size=2)))
    assert done.stdout.strip() == f"widget.{GROUP}/dry created (server dry run)"
    refused = widgets("create", "--dry-run=server", "-f", "-", stdin=manifest(widget("dry", size=0)), check=False)
    assert "spec.size: Invalid value: 0" in refused.stderr
    widgets("create", "-f", "-", stdin=manifest(widget("real")))
    widgets("delete", "widget", "real", "--dry-run=server")
    assert widgets("get", "widgets", "-o", "name").stdout.split() == [f"widget.{GROUP}/real"]


def test_imperative_creates_sent_as_protobuf(kubectl):
    kubectl("create", "namespace", "team")
    kubectl("create", "configmap", "c", "-n", "team", "--from-literal=a=b", "--from-literal=c=d")
    kubectl("create", "secret", "generic", "s", "-n", "team", "--from-literal=password=hunter2")
    kubectl("create", "serviceaccount", "robot", "-n", "team")
    assert get_json(kubectl, "configmap", "c", "-n", "team")["data"] == {"a": "b", "c": "d"}
    secret = get_json(kubectl, "secret", "s", "-n", "team")
    assert secret["data"] == {"password": "aHVudGVyMg=="} and secret["type"] == "Opaque"
    assert kubectl("get", "serviceaccount", "-n", "team", "-o", "name").stdout.split() == ["serviceaccount/robot"]


def test_everyone_may_do_everything_and_explain_reads_the_crd_schema(widgets):
    assert widgets("auth", "can-i", "delete", "pods").stdout.strip() == "yes"
    explained = widgets("explain", "widgets.spec")
    assert "size\t<integer> -required-" in explained.stdout and "color\t<string>" in explained.stdout
