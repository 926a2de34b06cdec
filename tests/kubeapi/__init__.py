"""A Kubernetes API server for tests (standard library only) and its pytest fixtures.

See `tests.kubeapi.server` for what it serves and `tests.kubeapi.fixtures` for how tests get one.
"""
