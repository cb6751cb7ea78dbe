import asyncio
import contextlib
import signal
import sys
import time
from typing import Any

import uvloop
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection

from actions.registry import IntegrationConfigError, load_registry
from executions.flows.publication import flows_compensation_problems
from executions.queue.leases import lease_owner_name
from executions.queue.limits import LimitsConflict, limits_declare, limits_withdraw
from executions.webhooks.running import webhook_delivery
from executions.worker.collector import collector_settled
from executions.worker.database import database_conninfo
from executions.worker.loops import LOOP_JOIN_SECONDS, worker_loops
from executions.worker.metrics import WorkerMetrics, metrics_address, metrics_listen
from executions.worker.pooling import PoolingConfig, pooling_config
from executions.worker.remote import RemoteWorkerRuntime, remote_target
from executions.worker.runtime import LocalWorkerRuntime
from executions.worker.scheduler import Scheduler
from orquestador import tracing
from orquestador.dbroles import restricted_role_message, unrestricted_reasons
from orquestador.jsonlog import lean_records
from orquestador.workerconfig import (
    WorkerConfig,
    WorkerConfigError,
    WorkerDisabled,
    worker_config,
)

OUTAGE_EXIT_STATUS = 3  # exit status when the database stayed unreachable too long


class Command(BaseCommand):
    help = "Claim and run executions until SIGTERM or SIGINT (WORKER_* settings)."

    # The database role check below is the one that matters here, and it runs before any claim.
    requires_system_checks = []

    async def _serve(
        self,
        scheduler: Scheduler,
        runtime: LocalWorkerRuntime | RemoteWorkerRuntime,
        config: WorkerConfig,
        pooling: PoolingConfig,
        metrics: WorkerMetrics,
    ) -> None:
        """One event loop for the whole worker: the runtime, the scheduler and its slots."""
        async with runtime:
            self.stdout.write(
                f"worker {scheduler.owner} running {config.concurrency} slots; "
                "SIGTERM or Ctrl-C drains and stops it"
            )
            if not pooling.listens:
                self.stdout.write(
                    "DATABASE_POOLER=transaction and no WORKER_LISTEN_DATABASE_URL: no LISTEN, "
                    f"so new work is found by polling every {config.poll_ms} ms"
                )
            self.stdout.flush()
            # The loops the apps registered (reconciliation's prober) are threads, with the
            # runtime's prober connection: nothing of their own.
            source = runtime.connection if isinstance(runtime, LocalWorkerRuntime) else None
            loops = [
                build(
                    owner=scheduler.owner,
                    may_probe=lambda: scheduler.busy < config.concurrency,
                    metrics=metrics,
                    source=source,
                )
                for build in worker_loops()
            ]
            for loop in loops:
                loop.start()
            # Webhook deliveries ride the runtime's shared connections: none of their own.
            deliveries = (
                webhook_delivery(runtime=runtime, scheduler=scheduler)
                if isinstance(runtime, LocalWorkerRuntime)
                else contextlib.nullcontext()
            )
            try:
                async with deliveries:
                    await scheduler.run()
            finally:
                for loop in loops:
                    loop.stop.set()
                if isinstance(runtime, LocalWorkerRuntime):
                    # A loop waiting for its connection stops at once, never on a database that
                    # is gone; a step in flight ends with its statement.
                    await asyncio.to_thread(runtime.close_prober_connection)
                # One deadline for all of them (daemon threads: one still stuck is left behind).
                deadline = time.monotonic() + LOOP_JOIN_SECONDS
                for loop in loops:
                    await asyncio.to_thread(loop.join, max(0.0, deadline - time.monotonic()))

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = worker_config(settings.WORKER_ENV)
            metrics_at = metrics_address(settings.WORKER_ENV)
            remote = remote_target(settings.WORKER_ENV, token=settings.WORKER_ENDPOINT_TOKEN)
            pooling = pooling_config(
                {**settings.WORKER_ENV, "DATABASE_POOLER": settings.DATABASE_POOLER},
                database_url=settings.DATABASE_URL,
            )
        except (WorkerConfigError, WorkerDisabled) as exc:
            raise CommandError(str(exc)) from None
        try:
            tracing.setup(service="orquestador-worker")  # before any connection or session
        except tracing.TracingConfigError as exc:
            raise CommandError(str(exc)) from None
        try:
            registry = load_registry(config)
        except IntegrationConfigError as exc:
            raise CommandError(f"INTEGRATIONS_FILE: {exc}") from None
        reasons = unrestricted_reasons(connection=connection)
        if reasons:
            raise CommandError(restricted_role_message(reasons))
        # Reported, not refused: such a transition falls back to reconciliation at run time.
        for problem in flows_compensation_problems(resolve=registry.resolve):
            self.stderr.write(f"compensation check: {problem} (falls back to reconciliation)")
        owner = lease_owner_name()
        try:
            limits_declare(owner=owner, routes=registry.routes(), fairness=config.fairness)
        except LimitsConflict as exc:
            raise CommandError(f"INTEGRATIONS_FILE: {exc}") from None
        conninfo = database_conninfo(settings.DATABASES["default"])
        connection.close()
        metrics = WorkerMetrics()
        try:
            endpoint = metrics_listen(
                metrics=metrics, address=metrics_at, token=settings.METRICS_TOKEN
            )
        except WorkerConfigError as exc:
            raise CommandError(str(exc)) from None

        lean_records()  # a few lines per execution at INFO: each costs what it writes only
        runtime = (
            RemoteWorkerRuntime(target=remote, config=config)
            if remote is not None
            else LocalWorkerRuntime(conninfo=conninfo, config=config, pooling=pooling)
        )
        scheduler = Scheduler(
            owner=owner,
            config=config,
            conninfo=conninfo,
            runtime=runtime,
            metrics=metrics,
            pooling=pooling,
        )
        # Set before the loop starts, so asyncio leaves SIGINT to us: both signals drain.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: scheduler.request_stop())
        collector_settled()  # startup's objects frozen, young collections spaced out
        # uvloop: the same asyncio API at about a tenth less CPU per execution
        # (docs/adr/0014-one-event-loop-per-worker.md).
        with endpoint, asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self._serve(scheduler, runtime, config, pooling, metrics))
        if scheduler.outage_exit:
            # An orchestrator restarts it (WORKER_DB_OUTAGE_EXIT_SECONDS).
            self.stderr.write(
                "worker stopped: the database was unreachable for longer than "
                "WORKER_DB_OUTAGE_EXIT_SECONDS"
            )
            sys.exit(OUTAGE_EXIT_STATUS)
        if scheduler.drained:
            self._withdraw(owner)
        self.stdout.write("worker stopped")

    def _withdraw(self, owner: str) -> None:
        """Its work drained: withdraw the route limits it declared at start, so a worker started
        now with other limits is not refused. Work abandoned at the stop may still be calling
        under them: then, as for a killed worker, they lapse with its registry row."""
        try:
            limits_withdraw(owner=owner)
        except DatabaseError as exc:
            self.stderr.write(
                f"route limits not withdrawn ({exc}); they lapse with this worker's registry row"
            )
        finally:
            connection.close()
