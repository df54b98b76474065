"""A kubeconfig for localkube: plain HTTP on 127.0.0.1 and a token the server accepts (it accepts any)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_kubeconfig(path: str | os.PathLike[str], *, server_url: str, namespace: str = "default") -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "localkube", "cluster": {"server": server_url}}],
        "users": [{"name": "localkube", "user": {"token": "localkube"}}],
        "contexts": [{"name": "localkube", "context": {"cluster": "localkube", "user": "localkube",
                                                       "namespace": namespace}}],
        "current-context": "localkube",
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # JSON is YAML, so every kubeconfig reader takes it; 0600 because kubectl warns about readable configs.
    target.write_text(json.dumps(config, indent=2) + "\n")
    target.chmod(0o600)
    return target
