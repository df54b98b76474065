"""The resource types the server knows: the built-in ones, and those a CustomResourceDefinition adds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Column:
    """A printer column: what `kubectl get` shows, read from the object by a JSONPath."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""
    format: str = ""


@dataclass(frozen=True)
class Version:
    name: str
    schema: dict[str, Any] | None = None  # openAPIV3Schema; None means anything goes (built-in types)
    columns: tuple[Column, ...] = ()
    status: bool = False  # has the /status subresource


@dataclass(frozen=True)
class ResourceType:
    group: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    versions: tuple[Version, ...]  # served versions, the storage version first
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    extra_subresources: tuple[str, ...] = ()  # e.g. pods/log
    list_kind: str = ""
    builtin: bool = True
    # Reviews (access, token): answered on create and never stored; localkube allows everything.
    review: bool = False
    # Objects are stored under one key for every served version (and for events.k8s.io, the core events).
    storage: tuple[str, str] = field(default=("", ""))

    @property
    def key(self) -> tuple[str, str]:
        return self.storage if self.storage != ("", "") else (self.group, self.plural)

    def version(self, name: str) -> Version | None:
        return next((v for v in self.versions if v.name == name), None)

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    @property
    def has_status(self) -> bool:
        return any(v.status for v in self.versions)


# Printer columns computed as kubectl shows them for pods, not read by a JSONPath (see tables.py).
POD_READY = "<pod ready>"
POD_STATUS = "<pod status>"
POD_RESTARTS = "<pod restarts>"
_AGE = Column("Age", ".metadata.creationTimestamp", "date")


def _builtin(group: str, version: str, kind: str, plural: str, *, namespaced: bool = True,
             short: tuple[str, ...] = (), status: bool = False, columns: tuple[Column, ...] = (),
             categories: tuple[str, ...] = (), extra: tuple[str, ...] = (),
             storage: tuple[str, str] = ("", ""), review: bool = False) -> ResourceType:
    return ResourceType(group=group, plural=plural, singular=kind.lower(), kind=kind, namespaced=namespaced,
                        versions=(Version(version, None, columns + (_AGE,), status),), short_names=short,
                        categories=categories, extra_subresources=extra, storage=storage, review=review)


BUILTINS: tuple[ResourceType, ...] = (
    _builtin("", "v1", "Namespace", "namespaces", namespaced=False, short=("ns",), status=True,
             columns=(Column("Status", ".status.phase"),)),
    _builtin("", "v1", "Pod", "pods", short=("po",), status=True, categories=("all",), extra=("log", "binding"),
             columns=(Column("Ready", POD_READY), Column("Status", POD_STATUS),
                      Column("Restarts", POD_RESTARTS, "integer"),
                      Column("IP", ".status.podIP", priority=1), Column("Node", ".spec.nodeName", priority=1))),
    _builtin("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",), status=True,
             columns=(Column("Status", ".status.phase"), Column("Volume", ".spec.volumeName"),
                      Column("Capacity", ".status.capacity.storage"),
                      Column("StorageClass", ".spec.storageClassName"),
                      Column("VolumeMode", ".spec.volumeMode", priority=1))),
    _builtin("", "v1", "PersistentVolume", "persistentvolumes", namespaced=False, short=("pv",), status=True,
             columns=(Column("Capacity", ".spec.capacity.storage"), Column("Status", ".status.phase"),
                      Column("Claim", ".spec.claimRef.name"), Column("StorageClass", ".spec.storageClassName"))),
    _builtin("", "v1", "Secret", "secrets", columns=(Column("Type", ".type"),)),
    _builtin("", "v1", "ConfigMap", "configmaps", short=("cm",)),
    _builtin("", "v1", "Service", "services", short=("svc",), status=True, categories=("all",),
             columns=(Column("Type", ".spec.type"), Column("Cluster-IP", ".spec.clusterIP"))),
    _builtin("", "v1", "Event", "events", short=("ev",),
             columns=(Column("Type", ".type"), Column("Reason", ".reason"),
                      Column("Object", ".involvedObject.name"), Column("Message", ".message"))),
    _builtin("", "v1", "ServiceAccount", "serviceaccounts", short=("sa",)),
    _builtin("", "v1", "Node", "nodes", namespaced=False, short=("no",), status=True),
    _builtin("", "v1", "Endpoints", "endpoints", short=("ep",)),
    _builtin("events.k8s.io", "v1", "Event", "events", short=("ev",), storage=("", "events"),
             columns=(Column("Type", ".type"), Column("Reason", ".reason"), Column("Note", ".note"))),
    _builtin("storage.k8s.io", "v1", "StorageClass", "storageclasses", namespaced=False, short=("sc",),
             columns=(Column("Provisioner", ".provisioner"), Column("VolumeBindingMode", ".volumeBindingMode"))),
    _builtin("coordination.k8s.io", "v1", "Lease", "leases"),
    _builtin("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
             "validatingwebhookconfigurations", namespaced=False),
    _builtin("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration",
             "mutatingwebhookconfigurations", namespaced=False),
    _builtin("apiregistration.k8s.io", "v1", "APIService", "apiservices", namespaced=False, status=True),
    _builtin("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
             namespaced=False, short=("crd", "crds"), status=True, categories=("api-extensions",)),
    _builtin("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", namespaced=False,
             review=True),
    _builtin("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews",
             namespaced=False, review=True),
    _builtin("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", review=True),
    _builtin("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", namespaced=False, review=True),
    _builtin("apps", "v1", "Deployment", "deployments", short=("deploy",), status=True, categories=("all",)),
    _builtin("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    _builtin("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    _builtin("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    _builtin("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
)

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
APISERVICE_KEY = ("apiregistration.k8s.io", "apiservices")
NAMESPACE_KEY = ("", "namespaces")


def from_crd(crd: dict[str, Any]) -> ResourceType:
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec.get("versions", []) if v.get("served", True)]
    served.sort(key=lambda v: not v.get("storage", False))
    versions = []
    for v in served:
        printer = v.get("additionalPrinterColumns")
        columns = tuple(Column(c["name"], c["jsonPath"], c.get("type", "string"), c.get("priority", 0),
                               c.get("description", ""), c.get("format", "")) for c in printer or ())
        if printer is None:
            columns = (_AGE,)  # the API server's default for a CRD without printer columns
        versions.append(Version(v["name"], (v.get("schema") or {}).get("openAPIV3Schema"), columns,
                                "status" in (v.get("subresources") or {})))
    return ResourceType(group=spec["group"], plural=names["plural"],
                        singular=names.get("singular") or names["kind"].lower(), kind=names["kind"],
                        namespaced=spec.get("scope", "Namespaced") == "Namespaced", versions=tuple(versions),
                        short_names=tuple(names.get("shortNames") or ()), categories=tuple(names.get("categories") or ()),
                        list_kind=names.get("listKind", ""), builtin=False)
