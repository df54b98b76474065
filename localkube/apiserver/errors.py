"""Kubernetes `Status` failures: every client (kubectl, the official client, kopf) keys its behaviour on
`reason` and `code`, so each failure carries both exactly as a real API server would send them."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """A failed request, answered as a `metav1.Status` with the given HTTP code."""

    def __init__(self, code: int, reason: str, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _qualified(kind_plural: str, group: str) -> str:
    return f"{kind_plural}.{group}" if group else kind_plural


def not_found(*, group: str, plural: str, name: str) -> APIError:
    return APIError(404, "NotFound", f'{_qualified(plural, group)} "{name}" not found',
                    details={"name": name, "group": group, "kind": plural})


def already_exists(*, group: str, plural: str, name: str) -> APIError:
    return APIError(409, "AlreadyExists", f'{_qualified(plural, group)} "{name}" already exists',
                    details={"name": name, "group": group, "kind": plural})


def conflict(*, group: str, plural: str, name: str, why: str) -> APIError:
    return APIError(409, "Conflict",
                    f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
                    details={"name": name, "group": group, "kind": plural})


def invalid(*, group: str, kind: str, name: str, causes: list[tuple[str, str, str]]) -> APIError:
    """`causes` are (reason, field path, message) triples, e.g. ("FieldValueRequired", "spec.x", "Required value")."""
    listed = [f"{field}: {message}" for _, field, message in causes]
    summary = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    return APIError(422, "Invalid", f'{_qualified(kind, group)} "{name}" is invalid: {summary}',
                    details={"name": name, "group": group, "kind": kind,
                             "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes]})


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def gone(message: str) -> APIError:
    return APIError(410, "Expired", message)
