from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Actions and integrations"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
