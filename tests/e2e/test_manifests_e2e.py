"""CDI's accept/reject table through kubectl: the CRD schema, kubectl's own validation and our admission webhook
together give each manifest the outcome CDI gives it (server-side dry run, so nothing starts importing)."""

from __future__ import annotations

import pytest

from tests.fixtures.cdi_system import CDISystem
from tests.support.cdi_cases import ACCEPTED, MANIFESTS, TABLE, Expected, refused_as_expected

pytestmark = pytest.mark.root


@pytest.mark.parametrize(("name", "expected"), sorted(TABLE.items()))
def test_cdi_accept_reject_table_with_kubectl(cdi: CDISystem, name: str, expected: Expected) -> None:
    done = cdi.kubectl("create", "--dry-run=server", "-f", str(MANIFESTS / name), check=False)
    if expected is ACCEPTED:
        assert done.returncode == 0, done.stderr
        assert "created (server dry run)" in done.stdout
    else:
        assert done.returncode != 0, f"{name} was admitted"
        assert refused_as_expected(expected, done.stderr), done.stderr
        assert "Traceback" not in done.stderr
