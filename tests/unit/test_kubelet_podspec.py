"""The kubelet's decisions that need no processes: env, $(VAR) references, image mapping, termination
messages, back-off and pod phase."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from localkube.kubelet import podspec
from localkube.kubelet.images import CannotRun, container_argv, repository

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "labels": {"app": "x"}},
       "spec": {"nodeName": "localkube"}, "status": {"podIP": "127.5.0.2"}}
OBJECTS = {
    ("secrets", "s"): {"kind": "Secret", "data": {"k": base64.b64encode(b"secret-v").decode()}},
    ("configmaps", "c"): {"kind": "ConfigMap", "data": {"k": "config-v", "other": "o"}},
}


async def fetch(resource: str, name: str) -> dict[str, Any] | None:
    return OBJECTS.get((resource, name))


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return asyncio.run(podspec.container_env(container, POD, fetch))


def test_env_sources_in_kubernetes_order() -> None:
    env = env_of({"envFrom": [{"configMapRef": {"name": "c"}, "prefix": "CM_"}], "env": [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "$(A)-$(CM_other)-$(NOPE)-$$(A)"},
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "A", "value": "2"},
    ]})
    assert env == {"CM_k": "config-v", "CM_other": "o", "A": "2", "B": "1-o-$(NOPE)-$(A)", "S": "secret-v",
                   "C": "config-v", "IP": "127.5.0.2", "L": "x"}


@pytest.mark.parametrize(("ref", "message"), [
    ({"secretKeyRef": {"name": "gone", "key": "k"}}, 'secret "gone" not found'),
    ({"configMapKeyRef": {"name": "c", "key": "nokey"}}, "couldn't find key nokey in configmap c"),
    ({"fieldRef": {"fieldPath": "spec.bogus"}}, "unsupported fieldRef fieldPath 'spec.bogus'"),
])
def test_env_errors_name_what_is_missing(ref: dict[str, Any], message: str) -> None:
    with pytest.raises(podspec.ConfigError) as caught:
        env_of({"env": [{"name": "X", "valueFrom": ref}]})
    assert str(caught.value) == message


def test_optional_references_are_skipped() -> None:
    assert env_of({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k",
                                                                          "optional": True}}}],
                   "envFrom": [{"secretRef": {"name": "gone", "optional": True}}]}) == {}


@pytest.mark.parametrize(("image", "repo"), [
    ("quay.io/kubevirt/cdi-importer:v1.60.0", "quay.io/kubevirt/cdi-importer"),
    ("localhost:5000/cdi-importer", "localhost:5000/cdi-importer"),
    ("localhost:5000/cdi-importer@sha256:abc", "localhost:5000/cdi-importer"),
    ("busybox", "busybox"),
])
def test_repository_strips_tag_and_digest(image: str, repo: str) -> None:
    assert repository(image) == repo


def test_image_mapping_plays_entrypoint_command_replaces_it() -> None:
    images = {"cdi-importer": ["/venv/bin/cdi-importer"]}
    argv = container_argv(images, image="quay.io/kubevirt/cdi-importer:v1", command=None, args=["-v=1"])
    assert argv == ["/venv/bin/cdi-importer", "-v=1"]
    assert container_argv(images, image="cdi-importer", command=["sh"], args=["-c", "x"]) == ["sh", "-c", "x"]
    assert container_argv(images, image="busybox", command=["echo"], args=None) == ["echo"]
    with pytest.raises(CannotRun, match="'quay.io/other/not-cdi-importer:v1' is not mapped"):
        container_argv(images, image="quay.io/other/not-cdi-importer:v1", command=None, args=["-v=1"])


def test_termination_message_file_first_then_log_tail_on_error() -> None:
    log = b"".join(b"line %d\n" % i for i in range(200))
    assert podspec.termination_message(policy="File", file_text=b"done", log=log, exit_code=1) == "done"
    assert podspec.termination_message(policy="File", file_text=b"", log=log, exit_code=1) == ""
    fallback = podspec.termination_message(policy="FallbackToLogsOnError", file_text=b"", log=log, exit_code=1)
    assert fallback.endswith("line 199\n") and len(fallback) <= podspec.FALLBACK_BYTES
    assert fallback.count("\n") <= podspec.FALLBACK_LINES
    assert podspec.termination_message(policy="FallbackToLogsOnError", file_text=b"", log=log, exit_code=0) == ""
    assert len(podspec.termination_message(policy="File", file_text=b"x" * 10000, log=b"", exit_code=0)) == 4096


def test_back_off_doubles_up_to_the_cap() -> None:
    assert [podspec.backoff(n, base=10, cap=300) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]


@pytest.mark.parametrize(("policy", "code", "again"), [
    ("Always", 0, True), ("Always", 1, True), ("OnFailure", 0, False), ("OnFailure", 3, True),
    ("Never", 3, False)])
def test_restart_policy(policy: str, code: int, again: bool) -> None:
    assert podspec.restarts(policy, code) is again


@pytest.mark.parametrize(("kwargs", "phase"), [
    ({"init_failed": True, "initialized": False, "containers": []}, "Failed"),
    ({"init_failed": False, "initialized": False, "containers": [(False, None)]}, "Pending"),
    ({"init_failed": False, "initialized": True, "containers": [(False, None)]}, "Pending"),
    ({"init_failed": False, "initialized": True, "containers": [(True, None), (False, 0)]}, "Running"),
    ({"init_failed": False, "initialized": True, "containers": [(False, 0), (False, 0)]}, "Succeeded"),
    ({"init_failed": False, "initialized": True, "containers": [(False, 0), (False, 2)]}, "Failed"),
    ({"init_failed": False, "initialized": True, "containers": [(False, 0), (False, None)]}, "Pending"),
])
def test_pod_phase(kwargs: dict[str, Any], phase: str) -> None:
    assert podspec.pod_phase(**kwargs) == phase


def test_log_tail() -> None:
    assert podspec.log_tail(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert podspec.log_tail(b"a\nb", 1) == b"b"
    assert podspec.log_tail(b"a\n", 0) == b""
    assert podspec.log_tail(b"a\n", None) == b"a\n"
