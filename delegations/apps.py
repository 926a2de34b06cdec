from django.apps import AppConfig


class DelegationsConfig(AppConfig):
    name = "delegations"
    verbose_name = "Delegations (agent side)"
