import pytest

from importer.errors import ImportFailed, Reason
from importer.urlpolicy import UrlPolicy


@pytest.mark.parametrize("url", [
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/x",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://100.100.100.200/",
])
def test_metadata_and_link_local_are_denied_by_default(url):
    with pytest.raises(ImportFailed) as failure:
        UrlPolicy.from_lists().check(url)
    assert failure.value.reason is Reason.URLDenied


def test_loopback_and_private_mirrors_are_allowed():
    policy = UrlPolicy.from_lists()
    policy.check("http://127.0.0.1:8080/disk.img")
    policy.check("https://10.1.2.3/disk.img")


def test_extra_deny_adds_and_allow_wins():
    policy = UrlPolicy.from_lists(deny=["127.0.0.0/8"])
    with pytest.raises(ImportFailed):
        policy.check("http://127.0.0.1/x")
    UrlPolicy.from_lists(allow=["169.254.1.1"], deny=[]).check("http://169.254.1.1/x")


def test_only_http_urls():
    with pytest.raises(ImportFailed) as failure:
        UrlPolicy.from_lists().check("file:///etc/passwd")
    assert failure.value.reason is Reason.InvalidArgument
