"""deploy/ as `kubectl apply -k deploy/` would send it (rendered offline by the real kubectl's kustomize): every
CRD, the controller speaking the env names it reads, RBAC with CDI's aggregated roles."""

from __future__ import annotations


import pytest

from cdi.api import names
from cdi.cli.localsystem import crd_documents
from tests.fixtures.deploy import DEPLOY



@pytest.fixture
def rendered(deploy_objects: dict[tuple[str, str], dict]) -> dict[tuple[str, str], dict]:
    return deploy_objects


def test_every_crd_of_the_repository_is_deployed(rendered: dict) -> None:
    ours = {crd["metadata"]["name"] for crd in crd_documents().values()}
    assert ours == {name for kind, name in rendered if kind == "CustomResourceDefinition"}
    assert "datavolumes.cdi.kubevirt.io" in ours


def test_controller_deployment(rendered: dict) -> None:
    deployment = rendered[("Deployment", "cdi-deployment")]
    assert deployment["metadata"]["namespace"] == "cdi"
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["cdi-controller"] and pod["securityContext"]["runAsNonRoot"] is True
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert set(env) <= {names.ENV_IMPORTER_IMAGE, names.ENV_UPLOADSERVER_IMAGE, names.ENV_PULL_POLICY,
                        names.ENV_WEBHOOK_PORT, names.ENV_WEBHOOK_HOST, names.ENV_UPLOAD_SERVER_CA_CERT,
                        names.ENV_UPLOAD_SERVER_CA_KEY, names.ENV_UPLOAD_CLIENT_CA, names.ENV_UPLOADPROXY_URL}
    assert {names.ENV_UPLOAD_SERVER_CA_CERT, names.ENV_UPLOAD_CLIENT_CA} <= set(env), "the upload component is on"
    service = rendered[("Service", "cdi-api")]
    # kopf registers the webhook at https://HOST:PORT, so the Service must answer on that very port.
    assert env[names.ENV_WEBHOOK_HOST] == "cdi-api.cdi.svc"
    assert service["spec"]["ports"][0]["port"] == int(env[names.ENV_WEBHOOK_PORT])
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


def _grants(role: dict, group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and (verb in r["verbs"] or "*" in r["verbs"])
               for r in role["rules"])


@pytest.mark.parametrize("role", ["admin", "edit", "view"])
def test_aggregated_roles_let_kubevirt_clone_checks_pass(rendered: dict, role: str) -> None:
    cluster_role = rendered[("ClusterRole", f"cdi.kubevirt.io:{role}")]
    assert cluster_role["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"
    assert _grants(cluster_role, names.GROUP, "datavolumes/source", "create")
    assert _grants(cluster_role, names.GROUP, "datavolumes", "list")


@pytest.mark.parametrize(("group", "resource", "verb"), [
    (names.GROUP, "datavolumes", "watch"), (names.GROUP, "datavolumes/status", "patch"),
    (names.GROUP, "cdiconfigs/status", "patch"), (names.GROUP, "storageprofiles", "create"),
    ("", "persistentvolumeclaims", "create"), ("", "pods", "delete"), ("", "events", "create"),
    ("storage.k8s.io", "storageclasses", "watch"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
])
def test_the_controller_may_do_what_it_does(rendered: dict, group: str, resource: str, verb: str) -> None:
    binding = rendered[("ClusterRoleBinding", "cdi-deployment")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "cdi-deployment", "namespace": "cdi"}]
    assert _grants(rendered[("ClusterRole", binding["roleRef"]["name"])], group, resource, verb)


def test_worker_images_are_dockerfile_targets_with_their_program(rendered: dict) -> None:
    """Worker pods set no command (CDI's shapes), so each worker image must start its program itself."""
    env = {e["name"]: e.get("value") for e in
           rendered[("Deployment", "cdi-deployment")]["spec"]["template"]["spec"]["containers"][0]["env"]}
    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    for variable, target, program in ((names.ENV_IMPORTER_IMAGE, "importer", "cdi-importer"),
                                      (names.ENV_UPLOADSERVER_IMAGE, "uploadserver", "cdi-uploadserver")):
        assert env[variable].rsplit(":", 1)[0].endswith("/" + program)  # also what localkube maps to the program
        stage = dockerfile.split(f" AS {target}\n", 1)[1].split("FROM ", 1)[0]
        assert f'ENTRYPOINT ["{program}"]' in stage
