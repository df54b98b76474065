"""A tiny kopf operator, run unchanged (`kopf run` in a subprocess) against localkube."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from tests.support.localkube_objects import GROUP, WIDGET_CRD, manifest, widget

OPERATOR = textwrap.dedent(f'''
    import kopf
    import kubernetes

    @kopf.on.startup()
    def connect(settings, **_):
        kubernetes.config.load_kube_config()
        settings.watching.server_timeout = 30

    @kopf.on.create("{GROUP}", "v1", "widgets")
    def make_pod(name, namespace, spec, patch, **_):
        pod = {{"apiVersion": "v1", "kind": "Pod",
                "metadata": {{"name": f"{{name}}-pod", "labels": {{"widget": name}}}},
                "spec": {{"containers": [{{"name": "main", "image": "busybox",
                                          "command": ["sleep", str(spec["size"])]}}]}}}}
        kopf.adopt(pod)
        kubernetes.client.CoreV1Api().create_namespaced_pod(namespace, pod)
        patch.status["phase"] = "PodCreated"
        return {{"pod": pod["metadata"]["name"]}}

    @kopf.on.field("", "v1", "pods", field="status.phase", labels={{"widget": kopf.PRESENT}})
    def reflect(new, labels, namespace, **_):
        kubernetes.client.CustomObjectsApi().patch_namespaced_custom_object_status(
            "{GROUP}", "v1", namespace, "widgets", labels["widget"], {{"status": {{"podPhase": new}}}})
''')


def test_kopf_operator_creates_a_child_pod_and_reflects_its_phase(kubectl, tmp_path):
    kubectl("apply", "-f", "-", stdin=manifest(WIDGET_CRD))
    (tmp_path / "operator.py").write_text(OPERATOR)
    log = (tmp_path / "kopf.log").open("w+")
    operator = subprocess.Popen([sys.executable, "-m", "kopf", "run", "--standalone", "-A", "--verbose",
                                 str(tmp_path / "operator.py")], env=kubectl.env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        kubectl("create", "-f", "-", stdin=manifest(widget("w", size=3)))
        kubectl("wait", "--for=jsonpath={.status.phase}=PodCreated", "widget/w", "--timeout=60s")
        owned = kubectl("get", "pod", "w-pod", "-o", "jsonpath={.metadata.ownerReferences[0].name}").stdout
        assert owned == "w"
        assert kubectl("get", "widget", "w", "-o", "jsonpath={.status.make_pod.pod}").stdout == "w-pod"

        # What the kubelet would report: the operator copies it into the widget's status.
        kubectl("patch", "pod", "w-pod", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Running"}}')
        kubectl("wait", "--for=jsonpath={.status.podPhase}=Running", "widget/w", "--timeout=60s")

        kubectl("delete", "widget", "w", "--timeout=60s")  # kopf's finalizer is released, then GC takes the pod
        kubectl("wait", "--for=delete", "pod/w-pod", "--timeout=60s")
    finally:
        operator.send_signal(signal.SIGINT)
        try:
            operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            operator.kill()
            operator.wait()
        log.seek(0)
        output = log.read()
        log.close()
    assert "Handler 'make_pod' succeeded" in output
    assert "Traceback" not in output and "[ERROR" not in output, output
