"""The executions app: its models, and what every runworker of the app starts.

This module is the app's composition root, outside the import contract of pyproject.toml: Django
imports it before the rooms, and it reaches into them to register what they hold.
"""

from importlib import import_module

from django.apps import AppConfig


class ExecutionsConfig(AppConfig):
    name = "executions"
    verbose_name = "Executions"

    def import_models(self) -> None:
        super().import_models()
        # Django's own registration: the webhook tables belong to this app (its migrations hold
        # them) but live with the webhooks room, which imports executions.models, not the reverse.
        import_module("executions.webhooks.models")

    def ready(self) -> None:
        from .worker.limiter import RouteSweeper
        from .worker.loops import worker_loop_register

        # Every runworker sweeps the route limits (executions/worker/limiter.py).
        worker_loop_register(RouteSweeper)
