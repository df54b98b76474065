"""Decodes the Kubernetes protobuf bodies kubectl's imperative generators send (`kubectl create namespace`,
`configmap`, `secret`, `serviceaccount`) into the JSON objects the rest of the server works on.

Only these kinds are described: field numbers from k8s.io/api's generated.proto (the facts, not the code)."""

from __future__ import annotations

import base64
from typing import Any

from .errors import APIError

MAGIC = b"k8s\x00"

# A schema maps a field number to (JSON name, how to read it); a dict is a nested message schema.
Schema = dict[int, tuple[str, Any]]

OWNER_REFERENCE: Schema = {1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"),
                           5: ("apiVersion", "string"), 6: ("controller", "bool"),
                           7: ("blockOwnerDeletion", "bool")}
OBJECT_META: Schema = {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
                       5: ("uid", "string"), 6: ("resourceVersion", "string"), 11: ("labels", "map"),
                       12: ("annotations", "map"), 13: ("ownerReferences", [OWNER_REFERENCE]),
                       14: ("finalizers", ["string"])}
KINDS: dict[str, Schema] = {
    "Namespace": {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("finalizers", ["string"])})},
    "ConfigMap": {1: ("metadata", OBJECT_META), 2: ("data", "map"), 3: ("binaryData", "map-bytes"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", OBJECT_META), 2: ("data", "map-bytes"), 3: ("type", "string"),
               4: ("stringData", "map"), 5: ("immutable", "bool")},
    "ServiceAccount": {1: ("metadata", OBJECT_META), 3: ("automountServiceAccountToken", "bool"),
                       4: ("imagePullSecrets", [{1: ("name", "string")}])},
}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos:pos + length]))
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return out


def _read(value: int | bytes, how: Any) -> Any:
    if isinstance(how, dict):
        return _message(value, how)  # type: ignore[arg-type]
    if how == "string":
        return value.decode()  # type: ignore[union-attr]
    if how == "bool":
        return bool(value)
    entry = dict(_fields(value))  # type: ignore[arg-type]  # a map entry: key = 1, value = 2
    key = entry.get(1, b"").decode()  # type: ignore[union-attr]
    raw = entry.get(2, b"")
    return key, base64.b64encode(raw).decode() if how == "map-bytes" else raw.decode()  # type: ignore[union-attr]


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            continue
        name, how = schema[number]
        if isinstance(how, list):
            out.setdefault(name, []).append(_read(value, how[0]))
        elif how in ("map", "map-bytes"):
            key, item = _read(value, how)
            out.setdefault(name, {})[key] = item
        else:
            out[name] = _read(value, how)
    return out


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded object (runtime.Unknown behind the "k8s\\0" magic) as a JSON-style dict."""
    try:
        if not body.startswith(MAGIC):
            raise ValueError("no k8s protobuf magic")
        envelope = dict(_fields(body[len(MAGIC):]))
        type_meta = _message(envelope.get(1, b""), {1: ("apiVersion", "string"), 2: ("kind", "string")})
        schema = KINDS.get(type_meta.get("kind", ""))
        if schema is None:
            raise APIError(415, "UnsupportedMediaType", f"localkube decodes protobuf only for "
                                                        f"{', '.join(KINDS)}; send {type_meta.get('kind')} as JSON")
        return {**type_meta, **_message(envelope.get(2, b""), schema)}
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise APIError(400, "BadRequest", f"the protobuf request body cannot be decoded: {exc}") from None
