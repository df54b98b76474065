import pytest

from importer import contract
from importer.errors import ImportFailed, Reason


def test_success_message_is_cdis_json():
    assert contract.success_message(preallocation_applied=False) == (
        '{"scratchSpaceRequired":false,"preallocationApplied":false,"message":"Import Complete"}')


def test_success_round_trip_with_labels():
    text = contract.success_message(preallocation_applied=True, labels={"kubevirt.io/os": "fedora"})
    parsed = contract.parse_termination(0, text)
    assert parsed.preallocation_applied and parsed.labels == {"kubevirt.io/os": "fedora"}
    assert parsed.message == "Import Complete" and parsed.reason is None


@pytest.mark.parametrize(("reason", "prefix"), [
    (Reason.NotFound, "Unable to connect to http data source: NotFound: "),
    (Reason.ChecksumMismatch, "Unable to process data: ChecksumMismatch: "),
])
def test_failure_line_carries_the_reason(reason, prefix):
    text = contract.failure_message(ImportFailed(reason, "line one\nline two"), source="http")
    assert text.startswith(prefix) and "\n" not in text
    parsed = contract.parse_termination(1, text)
    assert parsed.reason is reason and parsed.permanent


def test_cdi_texts_without_a_reason_parse_to_none():
    parsed = contract.parse_termination(1, "Unable to process data: exit status 1")
    assert parsed.reason is None and not parsed.permanent


def test_permanent_failures_exit_zero_with_cdis_json_and_transient_ones_exit_one():
    code, text = contract.failure_exit(ImportFailed(Reason.ChecksumMismatch, "expected a, got b"), source="http")
    assert code == 0 and text == '{"message":"Unable to process data: ChecksumMismatch: expected a, got b"}'
    parsed = contract.parse_termination(code, text)
    assert parsed.failed and parsed.permanent and parsed.reason is Reason.ChecksumMismatch
    code, text = contract.failure_exit(ImportFailed(Reason.SourceUnreachable, "refused"), source="http")
    assert (code, text) == (1, "Unable to connect to http data source: SourceUnreachable: refused")
    parsed = contract.parse_termination(code, text)
    assert parsed.failed and not parsed.permanent


def test_exit_zero_messages_of_success_and_of_cdis_checksum_failure():
    assert not contract.parse_termination(0, contract.success_message(preallocation_applied=False)).failed
    assert not contract.parse_termination(0, contract.deadline_message()).failed
    cdis = contract.parse_termination(0, '{"message":"Unable to process data: sha256 checksum mismatch"}')
    assert cdis.failed and cdis.reason is Reason.ChecksumMismatch
