"""Object lifecycle with the API server's rules: metadata the server owns, resourceVersion preconditions,
generation, /status isolation, CRD schemas, admission, finalizers, garbage collection and namespace deletion.

Objects reach here in storage form (convert.to_storage); handlers present them per served version."""

from __future__ import annotations

import copy
import datetime
import random
import re
import uuid
from typing import Any

from . import convert, errors, schema
from .admission import Admission
from .defaults import apply_defaults, initial_status
from .patch import apply_patch
from .registry import Registry
from .store import Store
from .types import APISERVICE_KEY, CRD_KEY, NAMESPACE_KEY, ResourceType, from_crd

Obj = dict[str, Any]
URL_ANNOTATION = "localkube.dev/url"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # as Kubernetes' generateName suffixes


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, reason: str, message: str) -> Obj:
    return {"type": kind, "status": "True", "lastTransitionTime": now(), "reason": reason, "message": message}


def _content(obj: Obj, rtype: ResourceType) -> Obj:
    """What `metadata.generation` counts changes of: everything but metadata (and status, if it is separate)."""
    skip = {"metadata", "status"} if rtype.has_status else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check_name(rtype: ResourceType, name: str) -> None:
    """Names are RFC 1123 subdomains (namespaces: labels), as the API server requires."""
    label = rtype.key == NAMESPACE_KEY
    pattern, limit = (_LABEL, 63) if label else (_SUBDOMAIN, 253)
    if len(name) > limit or not pattern.match(name):
        what, chars = ("label", "'-'") if label else ("subdomain", "'-' or '.'")
        raise errors.invalid(group=rtype.group, kind=rtype.kind, name=name, causes=[(
            "FieldValueInvalid", "metadata.name",
            f'Invalid value: "{name}": a lowercase RFC 1123 {what} must consist of lower case alphanumeric '
            f"characters, {chars}, and must start and end with an alphanumeric character "
            f"(at most {limit} characters)")])


class Operations:
    def __init__(self, store: Store, registry: Registry, admission: Admission) -> None:
        self.store = store
        self.registry = registry
        self.admission = admission

    # -- reads ------------------------------------------------------------------------------------------------

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rtype.key, namespace, name)
        if obj is None:
            raise errors.not_found(group=rtype.group, plural=rtype.plural, name=name)
        return obj

    def _check_namespace(self, rtype: ResourceType, namespace: str, *, creating: bool) -> None:
        if not rtype.namespaced:
            return
        ns = self.store.get(NAMESPACE_KEY, "", namespace)
        if ns is None:
            raise errors.not_found(group="", plural="namespaces", name=namespace)
        if creating and ns["metadata"].get("deletionTimestamp"):
            raise errors.APIError(403, "Forbidden", f'{rtype.plural}{"." + rtype.group if rtype.group else ""} '
                                  f'is forbidden: unable to create new content in namespace {namespace} because '
                                  f"it is being terminated")

    def _validate(self, rtype: ResourceType, version: str, obj: Obj, *, strict: bool) -> Obj:
        spec = rtype.version(version).schema if rtype.version(version) else None
        if spec is None:
            return obj
        outcome = schema.check(obj, spec)
        if strict and outcome.pruned:
            raise errors.bad_request(f'{rtype.kind} in version "{version}" cannot be handled as a {rtype.kind}: '
                                     + ", ".join(f'strict decoding error: unknown field "{p}"' for p in outcome.pruned))
        if outcome.causes:
            raise errors.invalid(group=rtype.group, kind=rtype.kind, name=obj["metadata"].get("name", ""),
                                 causes=outcome.causes)
        return outcome.value

    # -- create -----------------------------------------------------------------------------------------------

    async def create(self, rtype: ResourceType, version: str, namespace: str, body: Obj, *,
                     strict: bool = False, dry_run: bool = False) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of a create must be a JSON object")
        obj = convert.to_storage(rtype, copy.deepcopy(body))
        meta = obj.setdefault("metadata", {})
        if rtype.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent "
                                         "on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.invalid(group=rtype.group, kind=rtype.kind, name="", causes=[
                    ("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")])
            meta["name"] = meta["generateName"] + "".join(random.choice(_NAME_CHARS) for _ in range(5))
        name = meta["name"]
        _check_name(rtype, name)
        self._check_namespace(rtype, namespace, creating=True)
        for owned in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(owned, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
        obj["apiVersion"] = rtype.api_version(version) if rtype.group != "events.k8s.io" else "v1"
        obj["kind"] = rtype.kind
        if rtype.has_status:
            obj.pop("status", None)
            if initial_status(rtype) is not None:
                obj["status"] = initial_status(rtype)
        apply_defaults(rtype, obj, self.store)
        obj = self._validate(rtype, version, obj, strict=strict)
        present = convert.present(rtype, version, obj)
        mutated = await self.admission.admit(operation="CREATE", rtype=rtype, version=version, subresource="",
                                             namespace=namespace, name=name, obj=present, old=None, mutate=True)
        obj = self._validate(rtype, version, convert.to_storage(rtype, mutated), strict=False)
        await self.admission.admit(operation="CREATE", rtype=rtype, version=version, subresource="",
                                   namespace=namespace, name=name, obj=convert.present(rtype, version, obj),
                                   old=None, mutate=False)
        if self.store.get(rtype.key, meta.get("namespace", ""), name) is not None:
            raise errors.already_exists(group=rtype.group, plural=rtype.plural, name=name)
        self._check_namespace(rtype, namespace, creating=True)
        if dry_run:
            return obj
        self._before_write(rtype, obj)
        written = self.store.write(rtype.key, obj, old=None)
        self._collect_if_ownerless(rtype.key, written)
        return written

    # -- update, patch ----------------------------------------------------------------------------------------

    async def replace(self, rtype: ResourceType, version: str, namespace: str, name: str, body: Obj, *,
                      subresource: str = "", strict: bool = False, dry_run: bool = False) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request("the body of an update must be a JSON object")
        body = convert.to_storage(rtype, copy.deepcopy(body))
        meta = body.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise errors.bad_request(f'the name of the object ({meta["name"]}) does not match the name on the URL '
                                     f"({name})")
        wanted_rv = meta.get("resourceVersion")
        old = self.get(rtype, namespace, name)
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            raise self._stale(rtype, name)
        obj = await self._update(rtype, version, old, body, subresource=subresource, strict=strict)
        if wanted_rv and self.store.get(rtype.key, namespace, name) is not old:
            raise self._stale(rtype, name)  # changed while the webhooks were asked
        return obj if dry_run else self._commit(rtype, old, obj)

    async def patch(self, rtype: ResourceType, version: str, namespace: str, name: str, content_type: str,
                    body: Any, *, subresource: str = "", strict: bool = False, dry_run: bool = False
                    ) -> tuple[Obj, bool]:
        """Returns (object, created): server-side apply creates a missing object."""
        for _ in range(5):
            old = self.store.get(rtype.key, namespace, name)
            if old is None:
                if content_type.startswith("application/apply-patch") and not subresource:
                    return await self.create(rtype, version, namespace, {**body, "metadata": {
                        **(body.get("metadata") or {}), "name": name}}, strict=strict, dry_run=dry_run), True
                raise errors.not_found(group=rtype.group, plural=rtype.plural, name=name)
            current = convert.present(rtype, version, old)
            patched = apply_patch(content_type, current, body)
            if not isinstance(patched, dict):
                raise errors.bad_request("the patched object is not a JSON object")
            wanted_rv = (patched.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise self._stale(rtype, name)
            obj = await self._update(rtype, version, old, convert.to_storage(rtype, patched),
                                     subresource=subresource, strict=strict)
            if self.store.get(rtype.key, namespace, name) is old:
                return (obj if dry_run else self._commit(rtype, old, obj)), False
        raise self._stale(rtype, name)

    def _stale(self, rtype: ResourceType, name: str) -> errors.APIError:
        return errors.conflict(group=rtype.group, plural=rtype.plural, name=name,
                               why="the object has been modified; please apply your changes to the latest version "
                                   "and try again")

    async def _update(self, rtype: ResourceType, version: str, old: Obj, new: Obj, *, subresource: str,
                      strict: bool) -> Obj:
        if subresource == "status":
            obj = {**copy.deepcopy(old), "status": new.get("status")}
            if obj["status"] is None:
                obj.pop("status")
        else:
            obj = new
            if rtype.version(version).status:
                obj.pop("status", None)
                if "status" in old:
                    obj["status"] = copy.deepcopy(old["status"])
        meta = obj.setdefault("metadata", {})
        old_meta = old["metadata"]
        for owned in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace",
                      "generation", "resourceVersion"):
            if owned in old_meta:
                meta[owned] = old_meta[owned]
            else:
                meta.pop(owned, None)
        meta["name"] = old_meta["name"]
        obj["apiVersion"], obj["kind"] = old["apiVersion"], old["kind"]
        obj = self._validate(rtype, version, obj, strict=strict)
        namespace, name = old_meta.get("namespace", ""), old_meta["name"]
        present_old = convert.present(rtype, version, old)
        mutated = await self.admission.admit(operation="UPDATE", rtype=rtype, version=version,
                                             subresource=subresource, namespace=namespace, name=name,
                                             obj=convert.present(rtype, version, obj), old=present_old, mutate=True)
        obj = self._validate(rtype, version, convert.to_storage(rtype, mutated), strict=False)
        await self.admission.admit(operation="UPDATE", rtype=rtype, version=version, subresource=subresource,
                                   namespace=namespace, name=name, obj=convert.present(rtype, version, obj),
                                   old=present_old, mutate=False)
        if _content(obj, rtype) != _content(old, rtype):
            obj["metadata"]["generation"] = old_meta.get("generation", 1) + 1
        return obj

    def _commit(self, rtype: ResourceType, old: Obj, obj: Obj) -> Obj:
        if obj == old:
            return old  # a no-op write keeps the resourceVersion, as Kubernetes does
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(rtype.key, obj)
        self._before_write(rtype, obj)
        written = self.store.write(rtype.key, obj, old=old)
        if meta.get("deletionTimestamp"):
            self._finish_foreground(rtype.key, written)
        elif meta.get("ownerReferences") != old["metadata"].get("ownerReferences"):
            self._collect_if_ownerless(rtype.key, written)
        return written

    # -- delete -----------------------------------------------------------------------------------------------

    async def delete(self, rtype: ResourceType, version: str, namespace: str, name: str,
                     options: Obj | None = None, *, dry_run: bool = False) -> Obj:
        options = options or {}
        obj = self.get(rtype, namespace, name)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"] or (
                pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]):
            raise errors.conflict(group=rtype.group, plural=rtype.plural, name=name,
                                  why="Precondition failed: the UID or resourceVersion in the precondition does not "
                                      "match the object")
        await self.admission.admit(operation="DELETE", rtype=rtype, version=version, subresource="",
                                   namespace=namespace, name=name, obj=None,
                                   old=convert.present(rtype, version, obj), mutate=False,
                                   options={"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", **options})
        obj = self.get(rtype, namespace, name)
        if dry_run:
            return obj
        return self.delete_now(rtype.key, obj, policy=options.get("propagationPolicy") or (
            "Orphan" if options.get("orphanDependents") else "Background"))

    def delete_now(self, key: tuple[str, str], obj: Obj, *, policy: str = "Background") -> Obj:
        meta = obj["metadata"]
        if policy == "Orphan":
            self._orphan(meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if key == NAMESPACE_KEY:
            return self._delete_namespace(obj)
        if not finalizers:
            return self._remove(key, obj)
        if meta.get("deletionTimestamp") and finalizers == meta.get("finalizers"):
            return obj  # already being deleted
        updated = copy.deepcopy(obj)
        updated["metadata"]["finalizers"] = finalizers
        updated["metadata"].setdefault("deletionTimestamp", now())
        updated["metadata"].setdefault("deletionGracePeriodSeconds", 0)
        written = self.store.write(key, updated, old=obj)
        if "foregroundDeletion" in finalizers:
            for dep_key, dep in self.store.dependents(meta["uid"]):
                if self.store.by_uid(dep["metadata"]["uid"]) is not None:
                    self.delete_now(dep_key, dep)
            current = self.store.by_uid(meta["uid"])
            if current is None:
                return written  # the last blocking dependent went, and the owner with it
            self._finish_foreground(key, current[1])
        return written

    def _remove(self, key: tuple[str, str], obj: Obj) -> Obj:
        gone = self.store.remove(key, obj)
        meta = obj["metadata"]
        for dep_key, dep in self.store.dependents(meta["uid"]):  # background garbage collection
            if self.store.by_uid(dep["metadata"]["uid"]) is not None:
                self.delete_now(dep_key, dep)
        for ref in meta.get("ownerReferences") or ():
            owner = self.store.by_uid(ref.get("uid", ""))
            if owner is not None:
                self._finish_foreground(*owner)
        if key == CRD_KEY:
            self._crd_gone(obj)
        elif key == APISERVICE_KEY:
            self.registry.aggregated.pop((obj["spec"].get("group", ""), obj["spec"].get("version", "")), None)
        if meta.get("namespace"):
            ns = self.store.get(NAMESPACE_KEY, "", meta["namespace"])
            if ns is not None and ns["metadata"].get("deletionTimestamp"):
                self._finish_namespace(ns)
        return gone

    def _collect_if_ownerless(self, key: tuple[str, str], obj: Obj) -> None:
        """Background GC of an object whose owners are all gone: also one created (or given its owners) after
        they went, as a controller acting on a stale view of a deleted owner does."""
        refs = obj["metadata"].get("ownerReferences") or ()
        if refs and all(self.store.by_uid(ref.get("uid", "")) is None for ref in refs):
            self.delete_now(key, obj)

    def _orphan(self, uid: str) -> None:
        for key, dep in self.store.dependents(uid):
            updated = copy.deepcopy(dep)
            refs = [r for r in dep["metadata"]["ownerReferences"] if r.get("uid") != uid]
            if refs:
                updated["metadata"]["ownerReferences"] = refs
            else:
                del updated["metadata"]["ownerReferences"]
            self.store.write(key, updated, old=dep)

    def _finish_foreground(self, key: tuple[str, str], owner: Obj) -> None:
        """An owner deleted in the foreground goes once no dependent blocks it."""
        meta = owner["metadata"]
        if not meta.get("deletionTimestamp") or "foregroundDeletion" not in (meta.get("finalizers") or ()):
            return
        blocking = [dep for _, dep in self.store.dependents(meta["uid"]) if any(
            r.get("uid") == meta["uid"] and r.get("blockOwnerDeletion") for r in dep["metadata"]["ownerReferences"])]
        if blocking:
            return
        updated = copy.deepcopy(owner)
        updated["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != "foregroundDeletion"]
        if updated["metadata"]["finalizers"]:
            self.store.write(key, updated, old=owner)
        else:
            self._remove(key, updated)

    def _delete_namespace(self, ns: Obj) -> Obj:
        if not ns["metadata"].get("deletionTimestamp"):
            updated = copy.deepcopy(ns)
            updated["metadata"]["deletionTimestamp"] = now()
            updated["status"] = {"phase": "Terminating"}
            ns = self.store.write(NAMESPACE_KEY, updated, old=ns)
        name = ns["metadata"]["name"]
        for key in self.store.keys():
            for obj in self.store.list(key, name):
                if self.store.by_uid(obj["metadata"]["uid"]) is not None:
                    self.delete_now(key, obj)
        current = self.store.get(NAMESPACE_KEY, "", name)
        if current is not None:
            self._finish_namespace(current)
        return self.store.get(NAMESPACE_KEY, "", name) or ns

    def _finish_namespace(self, ns: Obj) -> None:
        name = ns["metadata"]["name"]
        if any(self.store.list(key, name) for key in self.store.keys() if key != NAMESPACE_KEY):
            return
        if [f for f in ns["metadata"].get("finalizers") or ()]:
            return  # someone else's finalizer on the namespace object itself
        self._remove(NAMESPACE_KEY, ns)

    # -- types that change what is served ---------------------------------------------------------------------

    def _before_write(self, rtype: ResourceType, obj: Obj) -> None:
        if rtype.key == CRD_KEY:
            served = from_crd(obj)
            clash = self.registry.lookup(served.group, served.versions[0].name, served.plural) if served.versions else None
            if clash is not None and clash.builtin:
                raise errors.invalid(group=rtype.group, kind=rtype.kind, name=obj["metadata"]["name"], causes=[
                    ("FieldValueInvalid", "spec.names.plural", "Invalid value: the resource is built in")])
            self.registry.add(served)
            names = obj["spec"]["names"]
            obj["status"] = {
                "acceptedNames": {k: v for k, v in names.items()},
                "storedVersions": [v["name"] for v in obj["spec"].get("versions", []) if v.get("storage")],
                "conditions": [_condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                               _condition("Established", "InitialNamesAccepted", "the initial names have been accepted")],
            }
        elif rtype.key == APISERVICE_KEY:
            spec = obj.get("spec") or {}
            url = (obj["metadata"].get("annotations") or {}).get(URL_ANNOTATION)
            if url and not spec.get("service"):
                self.registry.aggregated[(spec.get("group", ""), spec.get("version", ""))] = url.rstrip("/")
                obj["status"] = {"conditions": [_condition("Available", "Passed", "all checks passed")]}

    def _crd_gone(self, crd: Obj) -> None:
        served = from_crd(crd)
        self.registry.remove(served.group, served.plural)
        for obj in self.store.list(served.key):
            if self.store.by_uid(obj["metadata"]["uid"]) is not None:
                self._remove(served.key, obj)  # their dependents are collected as usual
