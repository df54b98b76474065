"""Which resources are served, and the discovery documents that tell clients so (legacy and aggregated v2)."""

from __future__ import annotations

from typing import Any

from .types import BUILTINS, VERBS, ResourceType

DISCOVERY_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


class Registry:
    def __init__(self) -> None:
        self._types: dict[tuple[str, str], ResourceType] = {(t.group, t.plural): t for t in BUILTINS}
        # group/version -> base URL of an aggregated API server (APIService with the localkube.dev/url annotation)
        self.aggregated: dict[tuple[str, str], str] = {}

    def add(self, rtype: ResourceType) -> None:
        self._types[(rtype.group, rtype.plural)] = rtype

    def remove(self, group: str, plural: str) -> None:
        self._types.pop((group, plural), None)

    def types(self) -> list[ResourceType]:
        return list(self._types.values())

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        rtype = self._types.get((group, plural))
        return rtype if rtype is not None and rtype.version(version) is not None else None

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        return next((t for t in self._types.values()
                     if t.group == group and t.kind == kind and t.version(version)), None)

    def group_versions(self) -> dict[str, list[str]]:
        """Group -> versions, preferred first; the core group is left out (it lives under /api)."""
        groups: dict[str, list[str]] = {}
        for t in sorted(self._types.values(), key=lambda t: (t.builtin is False, t.group)):
            if t.group:
                for v in t.versions:
                    if v.name not in groups.setdefault(t.group, []):
                        groups[t.group].append(v.name)
        for group, version in self.aggregated:
            if version not in groups.setdefault(group, []):
                groups[group].append(version)
        return groups

    def _in(self, group: str, version: str) -> list[ResourceType]:
        return sorted((t for t in self._types.values() if t.group == group and t.version(version)),
                      key=lambda t: t.plural)

    # -- legacy discovery -------------------------------------------------------------------------------------

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        types = self._in(group, version)
        if not types:
            return None
        resources: list[dict[str, Any]] = []
        for t in types:
            resources.append({"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
                              "kind": t.kind, "verbs": ["create"] if t.review else list(VERBS),
                              "shortNames": list(t.short_names),
                              "categories": list(t.categories)})
            for sub in (["status"] if t.version(version).status else []) + list(t.extra_subresources):
                resources.append({"name": f"{t.plural}/{sub}", "singularName": "", "namespaced": t.namespaced,
                                  "kind": "Binding" if sub == "binding" else t.kind,
                                  "verbs": {"status": ["get", "patch", "update"], "binding": ["create"]}.get(sub, ["get"])})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": types[0].api_version(version),
                "resources": resources}

    def api_group(self, group: str) -> dict[str, Any] | None:
        versions = self.group_versions().get(group)
        if not versions:
            return None
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": listed,
                "preferredVersion": listed[0]}

    def api_group_list(self) -> dict[str, Any]:
        groups = [self.api_group(g) for g in self.group_versions()]
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [{k: v for k, v in g.items() if k not in ("kind", "apiVersion")} for g in groups if g]}

    # -- aggregated discovery (apidiscovery.k8s.io/v2) -------------------------------------------------------

    def discovery_v2(self, *, core: bool, aggregated_lists: dict[tuple[str, str], dict[str, Any]]
                     ) -> dict[str, Any]:
        """`aggregated_lists` holds the APIResourceList each aggregated server answered for its group/version."""
        items = []
        groups = {"": ["v1"]} if core else self.group_versions()
        for group, versions in groups.items():
            entries = []
            for version in versions:
                listing = aggregated_lists.get((group, version)) or self.resource_list(group, version)
                entries.append({"version": version, "freshness": "Current",
                                "resources": _v2_resources(group, version, (listing or {}).get("resources", []))})
            items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": entries})
        return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
                "items": items}


def _v2_resources(group: str, version: str, resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Folds a legacy resource list ("pods", "pods/status"...) into v2 entries with nested subresources."""
    out: dict[str, dict[str, Any]] = {}
    for r in resources:
        name, _, sub = r["name"].partition("/")
        kind = {"group": r.get("group", group), "version": r.get("version", version), "kind": r["kind"]}
        if not sub:
            entry = {"resource": name, "responseKind": kind, "scope": "Namespaced" if r["namespaced"] else "Cluster",
                     "singularResource": r.get("singularName") or r["kind"].lower(), "verbs": r["verbs"],
                     "subresources": []}
            if r.get("shortNames"):
                entry["shortNames"] = r["shortNames"]
            if r.get("categories"):
                entry["categories"] = r["categories"]
            out[name] = entry
        elif name in out:
            out[name]["subresources"].append({"subresource": sub, "responseKind": kind, "verbs": r["verbs"]})
    return list(out.values())
