"""API paths the controller calls (core and grouped, namespaced and cluster-scoped, subresources)."""

from __future__ import annotations

import pytest

from cdi.api import names
from cdi.controller.kube import path


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"plural": "pods", "namespace": "vms", "name": "importer-x"}, "/api/v1/namespaces/vms/pods/importer-x"),
    ({"plural": "persistentvolumes"}, "/api/v1/persistentvolumes"),
    ({"group": "storage.k8s.io", "version": "v1", "plural": "storageclasses"}, "/apis/storage.k8s.io/v1/storageclasses"),
    ({"group": names.GROUP, "version": names.VERSION, "plural": names.DATAVOLUMES, "namespace": "vms", "name": "d",
      "subresource": "status"}, "/apis/cdi.kubevirt.io/v1beta1/namespaces/vms/datavolumes/d/status"),
    ({"group": names.GROUP, "version": names.VERSION, "plural": names.CDICONFIGS, "name": "config"},
     "/apis/cdi.kubevirt.io/v1beta1/cdiconfigs/config"),
])
def test_paths(kwargs, expected):
    assert path(**kwargs) == expected
