from django.apps import AppConfig


class DelegationsConfig(AppConfig):
    name = "delegations"
    verbose_name = "Delegations (agent side)"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from delegations import (
            checks,  # noqa: F401  (registers the system checks)
            sqlite_checkpoints,
        )

        connection_created.connect(sqlite_checkpoints.on_connection_created)
