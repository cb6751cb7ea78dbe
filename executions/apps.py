from django.apps import AppConfig


class ExecutionsConfig(AppConfig):
    name = "executions"
    verbose_name = "Executions"

    def ready(self) -> None:
        from .worker.limiter import RouteSweeper
        from .workerloops import worker_loop_register

        # Every runworker sweeps the route limits (executions/worker/limiter.py).
        worker_loop_register(RouteSweeper)
