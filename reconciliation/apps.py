from django.apps import AppConfig


class ReconciliationConfig(AppConfig):
    name = "reconciliation"
    verbose_name = "Reconciliation"

    def ready(self) -> None:
        # runworker runs the automatic prober beside its scheduler; executions, below this app,
        # learns of it here instead of importing it.
        from executions.worker.loops import worker_loop_register

        from .prober import Prober

        worker_loop_register(Prober)
