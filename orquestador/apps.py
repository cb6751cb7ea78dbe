from django.apps import AppConfig


class OrquestadorConfig(AppConfig):
    name = "orquestador"
    verbose_name = "orquestador"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
