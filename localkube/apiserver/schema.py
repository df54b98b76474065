"""A custom object checked against its CRD's structural openAPIV3Schema, as the API server does it:
defaults applied, unknown fields pruned, then types, required, enum, pattern and bounds validated."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {"object": (dict,), "array": (list,), "string": (str,), "integer": (int,),
                                        "number": (int, float), "boolean": (bool,)}
_NAMES = {dict: "object", list: "array", str: "string", int: "integer", float: "number", bool: "boolean"}


@dataclass
class Outcome:
    value: Any
    causes: list[tuple[str, str, str]] = field(default_factory=list)  # (reason, field, message)
    pruned: list[str] = field(default_factory=list)  # paths of unknown fields that were dropped


def _show(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return f'"{_NAMES[type(value)]}"'
    return str(value)


def check(obj: dict[str, Any], schema: dict[str, Any]) -> Outcome:
    """Validates a whole custom object; apiVersion, kind and metadata are the server's, not the schema's."""
    out = Outcome(None)
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    root = {**schema, "properties": {k: v for k, v in (schema.get("properties") or {}).items()
                                     if k not in ("apiVersion", "kind", "metadata")}}
    checked = _node(body, root, "", out)
    out.value = {**{k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}, **(checked or {})}
    return out


def _node(value: Any, schema: dict[str, Any], path: str, out: Outcome) -> Any:
    where = path or "<root>"
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            out.causes.append(("FieldValueInvalid", where, f"Invalid value: {_show(value)}: {where} in body must "
                                                           f"be of type int-or-string: {_show(value)}"))
        return value
    kind = schema.get("type")
    if kind and (not isinstance(value, _TYPES.get(kind, (object,))) or (kind != "boolean" and isinstance(value, bool))):
        actual = _NAMES.get(type(value), type(value).__name__)
        out.causes.append(("FieldValueTypeInvalid", where,
                           f"Invalid value: \"{actual}\": {where} in body must be of type {kind}: \"{actual}\""))
        return value
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_show(v) for v in schema["enum"])
        out.causes.append(("FieldValueNotSupported", where,
                           f"Unsupported value: {_show(value)}: supported values: {allowed}"))
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            out.causes.append(("FieldValueInvalid", where,
                               f"Invalid value: {_show(value)}: {where} in body should match '{schema['pattern']}'"))
        _bound(len(value), schema, "minLength", "maxLength", where, value, "chars long", out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _bound(value, schema, "minimum", "maximum", where, value, "", out)
    elif isinstance(value, list):
        _bound(len(value), schema, "minItems", "maxItems", where, value, "items", out)
        items = schema.get("items")
        if isinstance(items, dict):
            value = [_node(v, items, f"{path}[{i}]", out) for i, v in enumerate(value)]
    elif isinstance(value, dict):
        value = _object(value, schema, path, out)
    return value


def _bound(amount: float, schema: dict[str, Any], low: str, high: str, where: str, value: Any, unit: str,
           out: Outcome) -> None:
    if low in schema and amount < schema[low]:
        text = f"at least {schema[low]} {unit}" if unit else f"greater than or equal to {schema[low]}"
        out.causes.append(("FieldValueInvalid", where, f"Invalid value: {_show(value)}: {where} in body should "
                                                       f"{'have' if unit == 'items' else 'be'} {text}"))
    if high in schema and amount > schema[high]:
        text = f"at most {schema[high]} {unit}" if unit else f"less than or equal to {schema[high]}"
        out.causes.append(("FieldValueTooLong" if unit else "FieldValueInvalid", where,
                           f"Invalid value: {_show(value)}: {where} in body should "
                           f"{'have' if unit == 'items' else 'be'} {text}"))


def _object(value: dict[str, Any], schema: dict[str, Any], path: str, out: Outcome) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
    result: dict[str, Any] = {}
    for name, sub in props.items():
        if name not in value and "default" in sub:
            value = {**value, name: sub["default"]}
    for name, item in value.items():
        child = f"{path}.{name}" if path else name
        sub = props.get(name) if props else None
        if sub is None and isinstance(extra, dict):
            sub = extra
        if item is None and not (sub or {}).get("nullable"):
            if sub is None and not keep_unknown:
                out.pruned.append(child)
            continue  # nulls in non-nullable fields are dropped, as the API server does
        if sub is None:
            if keep_unknown or schema.get("x-kubernetes-embedded-resource") and name in ("apiVersion", "kind", "metadata"):
                result[name] = item
            else:
                out.pruned.append(child)
            continue
        result[name] = item if item is None else _node(item, sub, child, out)
    for name in schema.get("required") or ():
        if name not in result:
            out.causes.append(("FieldValueRequired", f"{path}.{name}" if path else name, "Required value"))
    return result
