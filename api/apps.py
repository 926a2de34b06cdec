from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "Machine API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api import schema  # noqa: F401 - registers the OpenAPI authentication extension
