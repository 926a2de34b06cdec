from django.apps import AppConfig


class DelegationsConfig(AppConfig):
    name = "delegations"
    verbose_name = "Delegations (agent side)"

    def ready(self) -> None:
        from delegations import checks  # noqa: F401  (registers the system checks)
