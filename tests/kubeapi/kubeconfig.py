"""Kubeconfig files pointing the `kubernetes` client and kubectl at the test API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONTEXT = "kubeapi-test"


def kubeconfig(server_url: str, *, token: str | None = None, namespace: str = "default") -> dict:
    """A kubeconfig document with one cluster/user/context, current; `token` becomes a bearer
    token (omitted: the user has no credentials)."""
    user: dict[str, Any] = {"token": token} if token is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server_url}}],
        "users": [{"name": CONTEXT, "user": user}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path | str, server_url: str, *, token: str | None = None, namespace: str = "default"
) -> Path:
    """Write the kubeconfig to `path` (parents created) and return the path.

    Pass it explicitly (`new_client_from_config(config_file=...)`, `kubectl --kubeconfig`): the
    `kubernetes` client reads $KUBECONFIG once, at import.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server_url, token=token, namespace=namespace)))
    return path
