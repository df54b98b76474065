"""CDI's naming rule for generated objects (cdi-facts §3.1)."""

from __future__ import annotations

import pytest

from cdi.controller.naming import fnv1a_32, generated_name, importer_pod_name, service_name


@pytest.mark.parametrize(("text", "digest"), [("", "811c9dc5"), ("a", "e40c292c"), ("foobar", "bf9cf968")])
def test_fnv1a_32_reference_vectors(text, digest):
    assert fnv1a_32(text) == digest


def test_short_names_are_base_dash_suffix():
    assert importer_pod_name("fedora-root") == "importer-fedora-root"
    assert generated_name("fedora-root", "scratch") == "fedora-root-scratch"


def test_long_base_is_cut_and_hashed_keeping_the_suffix():
    base = "b" * 300
    name = generated_name(base, "scratch")
    assert len(name) == 253
    assert name == "b" * (253 - 10 - len("scratch")) + "-" + fnv1a_32(base) + "-scratch"


def test_long_suffix_hashes_the_whole_name():
    pvc = "p" * 250
    assert importer_pod_name(pvc) == "importer-" + fnv1a_32("importer-" + pvc)


def test_service_names_are_dns_labels():
    assert service_name("cdi-upload-disk.v1") == "cdi-upload-disk-v1"
    long = service_name("cdi-upload-" + "x" * 80)
    assert len(long) == 63 and long.endswith("-cdi")
