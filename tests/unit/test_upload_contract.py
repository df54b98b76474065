"""Paths, URLs and termination messages of the upload contract."""

from __future__ import annotations

import pytest

from importer import contract as ic
from uploadproxy import contract as c
from uploadproxy.client import endpoint


@pytest.mark.parametrize(("path", "parsed"), [
    ("/v1beta1/upload", ("v1beta1", "upload")),
    ("/v1alpha1/upload-form-async", ("v1alpha1", "upload-form-async")),
    ("/v1beta1/upload-archive", ("v1beta1", "upload-archive")),
    ("/v1beta1/upload-state", ("v1beta1", "upload-state")),
    ("/v1/upload", None),
    ("/v1beta1/upload/x", None),
    ("/healthz", None),
])
def test_upload_paths(path: str, parsed: tuple[str, str] | None) -> None:
    assert c.upload_path(path) == parsed


@pytest.mark.parametrize(("base", "url"), [
    ("cdi-uploadproxy.example:8443", "https://cdi-uploadproxy.example:8443/v1beta1/upload-async"),
    ("https://proxy/", "https://proxy/v1beta1/upload-async"),
    ("https://proxy/v1beta1/upload", "https://proxy/v1beta1/upload-async"),  # virtctl accepts URLs with the path
])
def test_client_endpoint(base: str, url: str) -> None:
    assert endpoint(base, c.ASYNC_PATH) == url


def test_upload_termination_messages_as_cdi_writes_them() -> None:
    done = ic.success_message(preallocation_applied=True, message=ic.UPLOAD_COMPLETE, scratch_key=False)
    assert done == '{"preallocationApplied":true,"message":"Upload Complete"}'
    assert ic.deadline_message() == '{"deadlinePassed":true,"message":"Deadline Passed"}'
    parsed = ic.parse_termination(0, ic.deadline_message())
    assert parsed.deadline_passed and parsed.message == "Deadline Passed"
    assert not ic.parse_termination(0, done).deadline_passed
