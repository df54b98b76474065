"""localkube's pure parts: patches, selectors, schema checks, printer-column JSONPath, discovery folding."""

from __future__ import annotations

import datetime

import pytest

from localkube.apiserver import patch, schema, selectors, tables
from localkube.apiserver.errors import APIError
from localkube.apiserver.registry import Registry
from localkube.apiserver.types import from_crd
from tests.support.localkube_objects import WIDGET_CRD


def test_merge_patch_deletes_with_null_and_replaces_lists():
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2]}
    assert patch.merge_patch(target, {"a": {"b": None, "d": 3}, "l": [3]}) == {"a": {"c": 2, "d": 3}, "l": [3]}
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2]}  # the original is untouched


def test_json_patch_operations_and_escaping():
    doc = {"metadata": {"labels": {"a/b": "x"}}, "items": [1, 2]}
    ops = [{"op": "add", "path": "/items/-", "value": 3}, {"op": "remove", "path": "/items/0"},
           {"op": "replace", "path": "/metadata/labels/a~1b", "value": "y"},
           {"op": "copy", "from": "/items/0", "path": "/first"}, {"op": "move", "from": "/first", "path": "/moved"},
           {"op": "test", "path": "/moved", "value": 2}]
    assert patch.json_patch(doc, ops) == {"metadata": {"labels": {"a/b": "y"}}, "items": [2, 3], "moved": 2}
    with pytest.raises(APIError) as failed:
        patch.json_patch(doc, [{"op": "test", "path": "/items/0", "value": 9}])
    assert failed.value.code == 422
    with pytest.raises(APIError):
        patch.json_patch(doc, [{"op": "replace", "path": "/missing/x", "value": 1}])


def test_strategic_merge_by_keys_sets_and_directives():
    pod = {"metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "x"}]},
           "spec": {"containers": [{"name": "c1", "image": "i1", "ports": [{"containerPort": 80}]},
                                   {"name": "c2", "image": "i2"}],
                    "volumes": [{"name": "v1"}, {"name": "v2"}], "tolerations": [{"key": "k"}]}}
    merged = patch.strategic_merge(pod, {
        "metadata": {"finalizers": ["b", "a"], "ownerReferences": [{"uid": "1", "name": "y"}]},
        "spec": {"containers": [{"name": "c2", "image": "new"}, {"name": "c3", "image": "i3"},
                                {"name": "c1", "ports": [{"containerPort": 443}]}],
                 "volumes": [{"name": "v1", "$patch": "delete"}], "tolerations": [{"key": "other"}],
                 "$setElementOrder/containers": [{"name": "c3"}, {"name": "c1"}, {"name": "c2"}]}})
    assert merged["metadata"]["finalizers"] == ["a", "b"]
    assert merged["metadata"]["ownerReferences"] == [{"uid": "1", "name": "y"}]
    assert [(c["name"], c["image"]) for c in merged["spec"]["containers"]] == [("c3", "i3"), ("c1", "i1"), ("c2", "new")]
    assert merged["spec"]["containers"][1]["ports"] == [{"containerPort": 80}, {"containerPort": 443}]
    assert merged["spec"]["volumes"] == [{"name": "v2"}]
    assert merged["spec"]["tolerations"] == [{"key": "other"}]  # no merge key: replaced
    assert patch.strategic_merge({"a": {"x": 1, "y": 2}}, {"a": {"$retainKeys": ["y"], "y": 3}}) == {"a": {"y": 3}}


def test_unknown_patch_media_type_is_415():
    with pytest.raises(APIError) as failed:
        patch.apply_patch("text/plain", {}, {})
    assert failed.value.code == 415


@pytest.mark.parametrize(("selector", "expected"), [
    ("a=1", ["x"]), ("a==1,b", ["x"]), ("a!=1", ["y", "z"]), ("a in (1, 2)", ["x", "y"]),
    ("a notin (1)", ["y", "z"]), ("!b", ["y", "z"]), ("b", ["x"]), ("", ["x", "y", "z"]),
])
def test_label_selectors(selector, expected):
    objects = {"x": {"a": "1", "b": ""}, "y": {"a": "2"}, "z": {}}
    match = selectors.label_matcher(selector)
    assert [name for name, labels in objects.items() if match(labels)] == expected


def test_bad_selectors_are_400():
    for bad in ("a in 1", "!a=1", "=x"):
        with pytest.raises(APIError) as failed:
            selectors.label_matcher(bad)
        assert failed.value.code == 400


def test_field_selectors_and_label_selector_specs():
    match = selectors.field_matcher("status.phase=Running,spec.nodeName!=n1")
    assert match({"status": {"phase": "Running"}, "spec": {"nodeName": "n2"}})
    assert not match({"status": {"phase": "Running"}, "spec": {"nodeName": "n1"}})
    spec = selectors.selector_from_label_selector({"matchLabels": {"a": "1"},
                                                   "matchExpressions": [{"key": "b", "operator": "NotIn",
                                                                         "values": ["x", "y"]}]})
    assert spec({"a": "1", "b": "z"}) and not spec({"a": "1", "b": "x"})


SCHEMA = WIDGET_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schema_defaults_prunes_and_keeps_preserved_fields():
    obj = {"apiVersion": "v", "kind": "Widget", "metadata": {"name": "w", "anything": 1},
           "spec": {"size": 2, "unknown": 1, "note": None, "extra": {"free": [1]}}, "stray": True}
    outcome = schema.check(obj, SCHEMA)
    assert outcome.causes == []
    assert outcome.value == {"apiVersion": "v", "kind": "Widget", "metadata": {"name": "w", "anything": 1},
                             "spec": {"size": 2, "color": "red", "note": None, "extra": {"free": [1]}}}
    assert sorted(outcome.pruned) == ["spec.unknown", "stray"]


def test_schema_errors_name_every_field():
    outcome = schema.check({"spec": {"size": 0, "color": "pink", "code": "x1"}}, SCHEMA)
    assert outcome.causes == [
        ("FieldValueInvalid", "spec.size", "Invalid value: 0: spec.size in body should be greater than or equal to 1"),
        ("FieldValueNotSupported", "spec.color", 'Unsupported value: "pink": supported values: "red", "green", "blue"'),
        ("FieldValueInvalid", "spec.code", "Invalid value: \"x1\": spec.code in body should match '^[a-z]{3}$'"),
    ]
    assert schema.check({"spec": {"size": True}}, SCHEMA).causes[0][2].startswith(
        'Invalid value: "boolean": spec.size in body must be of type integer')
    assert schema.check({"spec": {}}, SCHEMA).causes == [("FieldValueRequired", "spec.size", "Required value")]


def test_printer_column_jsonpath_and_age():
    obj = {"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}],
                      "items": [{"n": 1}, {"n": 2}]}}
    assert tables.jsonpath(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert tables.jsonpath(obj, ".status.items[*].n") == [1, 2]
    assert tables.jsonpath(obj, ".status.items[-1].n") == [2]
    assert tables.jsonpath(obj, ".status.missing") == []
    now = datetime.datetime(2026, 1, 2, 0, 0, 0, tzinfo=datetime.UTC)
    assert [tables.age(t, now) for t in ("2026-01-01T23:59:30Z", "2026-01-01T23:55:00Z", "2026-01-01T18:00:00Z",
                                         "2025-12-20T00:00:00Z", "garbage")] == ["30s", "5m", "6h", "13d", "<unknown>"]


def test_crd_discovery_in_both_forms():
    registry = Registry()
    registry.add(from_crd(WIDGET_CRD))
    legacy = registry.resource_list("demo.localkube.test", "v1")
    assert [r["name"] for r in legacy["resources"]] == ["widgets", "widgets/status"]
    assert legacy["resources"][0]["shortNames"] == ["wg"]
    v2 = registry.discovery_v2(core=False, aggregated_lists={})
    group = next(i for i in v2["items"] if i["metadata"]["name"] == "demo.localkube.test")
    (resource,) = group["versions"][0]["resources"]
    assert resource["scope"] == "Namespaced" and resource["categories"] == ["gadgets"]
    assert resource["subresources"] == [{"subresource": "status", "verbs": ["get", "patch", "update"],
                                         "responseKind": {"group": "demo.localkube.test", "version": "v1",
                                                          "kind": "Widget"}}]


def test_pod_columns_read_like_kubectl():
    registry = Registry()
    pods = registry.lookup("", "v1", "pods")
    pod = {"metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
           "status": {"phase": "Running", "containerStatuses": [
               {"name": "a", "ready": True, "restartCount": 1, "state": {"running": {}}},
               {"name": "b", "ready": False, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    table = tables.table(pods, "v1", [pod], include_object="None", resource_version="1")
    names = [c["name"] for c in table["columnDefinitions"]]
    row = dict(zip(names, table["rows"][0]["cells"]))
    assert (row["Name"], row["Ready"], row["Status"], row["Restarts"]) == ("p", "1/2", "CrashLoopBackOff", 3)
    done = {**pod, "status": {"phase": "Succeeded", "containerStatuses": [
        {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}
    assert tables.table(pods, "v1", [done], include_object="None", resource_version="1")["rows"][0]["cells"][2] == \
        "Completed"
