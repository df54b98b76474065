"""The official kubernetes client against localkube: lists, watches with resume, status, conflicts."""

from __future__ import annotations

import pytest
from kubernetes import client, watch

from localkube.apiserver import ServerThread
from tests.support.localkube_objects import GROUP, WIDGET_CRD, widget


def api_client(server: ServerThread) -> client.ApiClient:
    config = client.Configuration()
    config.host = server.url
    config.api_key = {"authorization": "Bearer anything"}
    return client.ApiClient(config)


@pytest.fixture
def core(apiserver):
    with api_client(apiserver) as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def custom(apiserver):
    with api_client(apiserver) as api:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(WIDGET_CRD)
        yield client.CustomObjectsApi(api)


def configmap(name: str, labels: dict | None = None, **data: str) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


def test_create_returns_server_metadata_and_stale_updates_conflict(core):
    made = core.create_namespaced_config_map("default", configmap("c", a="1"))
    assert made.metadata.uid and made.metadata.creation_timestamp and made.metadata.resource_version
    made.data = {"a": "2"}
    updated = core.replace_namespaced_config_map("c", "default", made)
    assert int(updated.metadata.resource_version) > int(made.metadata.resource_version)
    made.data = {"a": "3"}  # still carries the old resourceVersion
    with pytest.raises(client.ApiException) as stale:
        core.replace_namespaced_config_map("c", "default", made)
    assert stale.value.status == 409
    assert "the object has been modified" in stale.value.body
    with pytest.raises(client.ApiException) as exists:
        core.create_namespaced_config_map("default", configmap("c"))
    assert exists.value.status == 409 and '"reason": "AlreadyExists"' in exists.value.body
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_config_map("nope", "default")
    assert missing.value.status == 404


def test_watch_resumes_from_a_resource_version(core):
    core.create_namespaced_config_map("default", configmap("a"))
    listed = core.list_namespaced_config_map("default")
    assert [c.metadata.name for c in listed.items] == ["a"]
    start = listed.metadata.resource_version
    core.create_namespaced_config_map("default", configmap("b"))
    core.patch_namespaced_config_map("a", "default", {"data": {"x": "1"}})
    core.delete_namespaced_config_map("b", "default")

    seen = [(e["type"], e["object"].metadata.name, e["object"].metadata.resource_version)
            for e in watch.Watch().stream(core.list_namespaced_config_map, "default",
                                          resource_version=start, timeout_seconds=1)]
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    # Resuming from the middle sees only what came after.
    rest = [(e["type"], e["object"].metadata.name)
            for e in watch.Watch().stream(core.list_namespaced_config_map, "default",
                                          resource_version=seen[0][2], timeout_seconds=1)]
    assert rest == [("MODIFIED", "a"), ("DELETED", "b")]


def test_watch_sends_bookmarks_and_follows_selectors(core):
    core.create_namespaced_config_map("default", configmap("a", {"team": "x"}))
    core.create_namespaced_config_map("default", configmap("b", {"team": "y"}))
    events = [(e["type"], e["raw_object"]["metadata"].get("name")) for e in watch.Watch().stream(
        core.list_namespaced_config_map, "default", label_selector="team in (x)", allow_watch_bookmarks=True,
        timeout_seconds=1)]
    assert events == [("ADDED", "a"), ("BOOKMARK", None)]


def test_watch_from_a_compacted_version_is_gone():
    with ServerThread(history=5) as server, api_client(server) as api:
        core = client.CoreV1Api(api)
        first = core.create_namespaced_config_map("default", configmap("c0"))
        for i in range(1, 10):
            core.create_namespaced_config_map("default", configmap(f"c{i}"))
        with pytest.raises(client.ApiException) as gone:
            list(watch.Watch().stream(core.list_namespaced_config_map, "default",
                                      resource_version=first.metadata.resource_version, timeout_seconds=1))
        assert gone.value.status == 410


def test_selectors_and_paging(core):
    for i, (team, tier) in enumerate([("x", "web"), ("x", "db"), ("y", "web"), ("z", None)]):
        core.create_namespaced_config_map("default", configmap(f"c{i}", {"team": team, **({"tier": tier} if tier else {})}))

    def names(**kw) -> list[str]:
        return [c.metadata.name for c in core.list_namespaced_config_map("default", **kw).items]

    assert names(label_selector="team=x") == ["c0", "c1"]
    assert names(label_selector="team==x,tier!=db") == ["c0"]
    assert names(label_selector="team notin (x,y)") == ["c3"]
    assert names(label_selector="!tier") == ["c3"]
    assert names(label_selector="tier") == ["c0", "c1", "c2"]
    assert names(field_selector="metadata.name=c2") == ["c2"]
    assert names(field_selector="metadata.name!=c2,metadata.namespace=default") == ["c0", "c1", "c3"]
    with pytest.raises(client.ApiException) as bad:
        core.list_namespaced_config_map("default", label_selector="team in x")
    assert bad.value.status == 400

    page = core.list_namespaced_config_map("default", limit=3)
    assert [c.metadata.name for c in page.items] == ["c0", "c1", "c2"] and page.metadata._continue
    rest = core.list_namespaced_config_map("default", limit=3, _continue=page.metadata._continue)
    assert [c.metadata.name for c in rest.items] == ["c3"] and not rest.metadata._continue


def test_custom_object_status_patch_and_generation(custom):
    custom.create_namespaced_custom_object(GROUP, "v1", "default", "widgets", widget("w", size=2))
    patched = custom.patch_namespaced_custom_object_status(GROUP, "v1", "default", "widgets", "w",
                                                           {"status": {"phase": "Ready"}, "spec": {"size": 99}})
    assert patched["status"] == {"phase": "Ready"} and patched["spec"]["size"] == 2
    assert patched["metadata"]["generation"] == 1
    respec = custom.patch_namespaced_custom_object(GROUP, "v1", "default", "widgets", "w", {"spec": {"size": 3}})
    assert respec["metadata"]["generation"] == 2 and respec["status"] == {"phase": "Ready"}
    same = custom.patch_namespaced_custom_object(GROUP, "v1", "default", "widgets", "w", {"spec": {"size": 3}})
    assert same["metadata"]["resourceVersion"] == respec["metadata"]["resourceVersion"]  # no-op, no write


def test_finalizers_hold_deletion_until_removed(core):
    core.create_namespaced_config_map("default", {"metadata": {"name": "f", "finalizers": ["test/hold"]}})
    core.delete_namespaced_config_map("f", "default")
    held = core.read_namespaced_config_map("f", "default")
    assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == ["test/hold"]
    core.patch_namespaced_config_map("f", "default", [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(client.ApiException) as gone:
        core.read_namespaced_config_map("f", "default")
    assert gone.value.status == 404


def test_foreground_deletion_waits_for_blocking_dependents(core):
    owner = core.create_namespaced_config_map("default", configmap("owner"))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid,
           "blockOwnerDeletion": True}
    core.create_namespaced_config_map("default", {"metadata": {"name": "child", "ownerReferences": [ref],
                                                               "finalizers": ["test/slow"]}})
    core.delete_namespaced_config_map("owner", "default", propagation_policy="Foreground")
    waiting = core.read_namespaced_config_map("owner", "default")
    assert waiting.metadata.finalizers == ["foregroundDeletion"] and waiting.metadata.deletion_timestamp
    assert core.read_namespaced_config_map("child", "default").metadata.deletion_timestamp
    core.patch_namespaced_config_map("child", "default", {"metadata": {"finalizers": None}})
    assert [c.metadata.name for c in core.list_namespaced_config_map("default").items] == []


def test_dependents_of_an_owner_already_gone_are_collected(core):
    """A controller acting on a stale view creates a child for a deleted owner: the GC removes it, as Kubernetes'
    does; a child with one owner left, or given only a live owner, stays."""
    owner = core.create_namespaced_config_map("default", configmap("owner"))
    live = core.create_namespaced_config_map("default", configmap("live"))
    core.delete_namespaced_config_map("owner", "default")
    gone_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    live_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "live", "uid": live.metadata.uid}
    core.create_namespaced_config_map("default", {"metadata": {"name": "late", "ownerReferences": [gone_ref]}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "shared",
                                                               "ownerReferences": [gone_ref, live_ref]}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "moved", "ownerReferences": [live_ref]}})
    core.patch_namespaced_config_map("moved", "default", [{"op": "replace", "path": "/metadata/ownerReferences",
                                                           "value": [gone_ref]}])
    assert sorted(c.metadata.name for c in core.list_namespaced_config_map("default").items) == ["live", "shared"]


def test_events_in_both_api_groups_share_storage(apiserver, core):
    core.create_namespaced_event("default", {
        "metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Started", "message": "it runs", "type": "Normal"})
    with api_client(apiserver) as api:
        new = client.EventsV1Api(api).read_namespaced_event("e1", "default")
    assert new.note == "it runs" and new.regarding.name == "p"
    assert [e.metadata.name for e in core.list_namespaced_event(
        "default", field_selector="involvedObject.name=p,involvedObject.kind=Pod").items] == ["e1"]


def test_deleting_a_crd_deletes_its_objects_and_its_api(apiserver, custom):
    custom.create_namespaced_custom_object(GROUP, "v1", "default", "widgets", widget("w"))
    with api_client(apiserver) as api:
        client.ApiextensionsV1Api(api).delete_custom_resource_definition(f"widgets.{GROUP}")
        groups = [g.name for g in client.ApisApi(api).get_api_versions().groups]
    assert GROUP not in groups
    with pytest.raises(client.ApiException) as gone:
        custom.list_namespaced_custom_object(GROUP, "v1", "default", "widgets")
    assert gone.value.status == 404
    assert apiserver.store.list((GROUP, "widgets")) == []
