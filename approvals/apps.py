from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals (human side)"

    def ready(self) -> None:
        from approvals import receivers  # noqa: F401  (connects the delegation signals)
