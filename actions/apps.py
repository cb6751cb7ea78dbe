from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Actions and integrations"
