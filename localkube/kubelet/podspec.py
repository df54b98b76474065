"""The kubelet's decisions that need no processes: environment, termination messages, back-off, phase."""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

Object = dict[str, Any]
# fetch("secrets" | "configmaps", name) -> the object, or None when it does not exist
Fetch = Callable[[str, str], Awaitable[Object | None]]

MESSAGE_LIMIT = 4096  # bytes of a termination message, as the kubelet keeps
FALLBACK_LINES = 80  # FallbackToLogsOnError: the log tail, at most this many lines ...
FALLBACK_BYTES = 2048  # ... and this many bytes

_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z0-9]+)\)")
_LABELLED_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class ConfigError(Exception):
    """A container cannot be configured yet (a missing Secret or key): the kubelet retries, as Kubernetes'
    CreateContainerConfigError."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) references in env values, command and args; $$ escapes, unknown ones stay as written."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))
    return _REFERENCE.sub(replace, text)


def field_value(pod: Object, field_path: str) -> str:
    simple = {
        "metadata.name": pod["metadata"].get("name"), "metadata.namespace": pod["metadata"].get("namespace"),
        "metadata.uid": pod["metadata"].get("uid"), "spec.nodeName": pod["spec"].get("nodeName"),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName"),
        "status.podIP": pod.get("status", {}).get("podIP"), "status.hostIP": pod.get("status", {}).get("hostIP"),
    }
    if field_path in simple:
        return simple[field_path] or ""
    labelled = _LABELLED_FIELD.match(field_path)
    if labelled:
        return pod["metadata"].get(labelled.group(1), {}).get(labelled.group(2), "")
    raise ConfigError(f"unsupported fieldRef fieldPath {field_path!r}")


def _decoded(obj: Object, key: str) -> str | None:
    if key in obj.get("data", {}) and obj.get("kind") == "Secret":
        return base64.b64decode(obj["data"][key]).decode()
    if key in obj.get("data", {}):
        return str(obj["data"][key])
    if key in obj.get("binaryData", {}):
        return base64.b64decode(obj["binaryData"][key]).decode()
    return None


def object_items(obj: Object) -> dict[str, bytes]:
    """Every key of a Secret or ConfigMap with its bytes (what a volume of it holds as files)."""
    items: dict[str, bytes] = {}
    for key, value in obj.get("data", {}).items():
        items[key] = base64.b64decode(value) if obj.get("kind") == "Secret" else str(value).encode()
    for key, value in obj.get("binaryData", {}).items():
        items[key] = base64.b64decode(value)
    return items


async def _key_ref(fetch: Fetch, resource: str, ref: Object) -> str | None:
    kind = "secret" if resource == "secrets" else "configmap"
    obj = await fetch(resource, ref["name"])
    if obj is None:
        if ref.get("optional"):
            return None
        raise ConfigError(f'{kind} "{ref["name"]}" not found')
    value = _decoded(obj, ref["key"])
    if value is None and not ref.get("optional"):
        raise ConfigError(f'couldn\'t find key {ref["key"]} in {kind} {ref["name"]}')
    return value


async def container_env(container: Object, pod: Object, fetch: Fetch) -> dict[str, str]:
    """The container's environment from envFrom and env, in Kubernetes' order (env wins; later wins)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        resource, ref = (("secrets", source["secretRef"]) if "secretRef" in source
                         else ("configmaps", source["configMapRef"]))
        obj = await fetch(resource, ref["name"])
        if obj is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{resource[:-1]} "{ref["name"]}" not found')
        for key, value in object_items(obj).items():
            env[source.get("prefix", "") + key] = value.decode()
    for var in container.get("env", []):
        source = var.get("valueFrom")
        if source is None:
            env[var["name"]] = expand(var.get("value", ""), env)
            continue
        if "fieldRef" in source:
            value: str | None = field_value(pod, source["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in source:
            value = await _key_ref(fetch, "secrets", source["secretKeyRef"])
        elif "configMapKeyRef" in source:
            value = await _key_ref(fetch, "configmaps", source["configMapKeyRef"])
        else:
            raise ConfigError(f"env {var['name']}: unsupported valueFrom {sorted(source)}")
        if value is not None:
            env[var["name"]] = value
    return env


def log_tail(data: bytes, lines: int | None) -> bytes:
    if lines is None:
        return data
    if lines <= 0:
        return b""
    kept = data.splitlines(keepends=True)[-lines:]
    return b"".join(kept)


def termination_message(*, policy: str, file_text: bytes, log: bytes, exit_code: int) -> str:
    """state.terminated.message: the file's content, or with FallbackToLogsOnError and a failure and an
    empty file, the log tail."""
    message = file_text[:MESSAGE_LIMIT]
    if not message.strip() and policy == "FallbackToLogsOnError" and exit_code != 0:
        message = log_tail(log, FALLBACK_LINES)[-FALLBACK_BYTES:]
    return message.decode(errors="replace")


def backoff(restarts: int, *, base: float, cap: float) -> float:
    """Seconds to wait before restart number restarts+1: base, 2*base, 4*base, ... up to cap."""
    return min(base * (2 ** restarts), cap)


def restarts(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def pod_phase(*, init_failed: bool, initialized: bool, containers: Sequence[tuple[bool, int | None]]) -> str:
    """containers: per app container, (has run and is running or going to be restarted, last exit code or
    None before its first exit)."""
    if init_failed:
        return "Failed"
    if not initialized or not containers:
        return "Pending"
    if any(active for active, _ in containers):
        return "Running"
    codes = [code for _, code in containers]
    if any(code is None for code in codes):
        return "Pending"
    return "Succeeded" if all(code == 0 for code in codes) else "Failed"
