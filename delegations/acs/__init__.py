"""The Agent Control Standard (ACS v0.1.0) endpoint: subagentStart/subagentStop from runtimes
outside Kubernetes. See docs/architecture.md, "ACS hooks"."""
