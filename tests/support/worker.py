"""Helpers for worker tests: flows, accepted executions, scripted adapters, waits and row readers.

Executions are created the way an acceptance leaves them (request blocked, revision + 1, PENDING
execution with its accepted revision, TRANSITION_ACCEPTED, NOTIFY), with plain SQL on a
runtime-role connection, so a test can create hundreds without the API.

Adapters here are test-only trusted code: they record every call (input, external key, attempt)
and answer from a script, or wait on events a test controls. `SimulatedCrash` is a
BaseException: raised from an adapter it abandons the attempt without any result being saved,
the way a process dies mid-call.
"""

import contextlib
import dataclasses
import datetime
import json
import os
import random
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from actions.base import ActionContext, ActionResult, Binding, Contract, Outcome, Route, StopSignal
from actions.registry import NO_OP, Registry
from actions.simulation import SIMULATION_BINDINGS
from executions import sql
from executions.flows.canonical import sha256_hex
from executions.queue.checkpoints import (
    StartItem,
    SucceedItem,
    checkpoints_start,
    checkpoints_succeed,
)
from executions.queue.claims import Dispatch, executions_claim
from executions.queue.finalize import FinalizeItem, executions_finalize, finalize_refusal
from executions.queue.leases import ExecutionSuperseded, Fence
from executions.queue.steps import run_sync
from executions.worker import runtime as worker_runtime
from executions.worker.runtime import LocalWorkerRuntime
from executions.worker.scheduler import Scheduler
from executions.worker.slots import Holding
from executions.worker.wire import ExecutionPackage, ExecutionResult
from orquestador.workerconfig import WorkerConfig
from tests.conftest import manage
from tests.support.loop import OnLoop, on_loop

DEFAULT_TIMEOUT = 15.0  # seconds a wait_until gives a condition before failing the test
# seconds for a runworker to start (Django, its registry, its pools): CI under load saw four
# started at once take more than 15 s.
WORKER_START_SECONDS = 60.0

# Short leases so expiry-driven tests finish quickly; every wait is on a condition.
FAST = WorkerConfig(
    concurrency=2,
    batch=2,
    poll_ms=50,
    lease_seconds=2.0,
    renew_seconds=0.5,
    drain_seconds=2.0,
    retry_base_seconds=0.01,
    retry_max_seconds=0.05,
    retry_after_max_seconds=0.2,
    endpoint_run_seconds=1.5,  # a remote runtime waits 2 s for an answer
)


class SimulatedCrash(BaseException):
    """Raised by an adapter: the process 'dies' mid-call and nothing after it runs."""


def wait_until(
    predicate: Callable[[], Any], *, timeout: float = DEFAULT_TIMEOUT, what: str = "condition"
) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


# ------------------------------------------------------------------------------
# Flows and accepted executions
# ------------------------------------------------------------------------------
def action(
    action_id: str, capability: str, *, version: int = 1, input: dict | None = None
) -> dict[str, Any]:
    return {"id": action_id, "capability": capability, "version": version, "input": input or {}}


def flow_definition(
    actions: list[dict[str, Any]],
    *,
    key: str = "test-flow",
    version: int = 1,
    rules: list[dict[str, Any]] | None = None,
    hit_policy: str = "FIRST",
    updates: list[dict[str, Any]] | None = None,
    data_schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A flow with one transition `go` from DRAFT, running `actions`."""
    return {
        "key": key,
        "version": version,
        "initialState": "DRAFT",
        "states": ["DRAFT", "DONE", "OTHER"],
        "dataSchema": data_schema or {"type": "object"},
        "transitions": [
            {
                "id": "go",
                "from": ["DRAFT"],
                "actions": actions,
                "decision": {
                    "hitPolicy": hit_policy,
                    "rules": rules
                    or [{"id": "always", "when": True, "target": "DONE", "outcome": "OK"}],
                },
                "updates": updates if updates is not None else [{"path": "/done", "value": True}],
            }
        ],
    }


def create_flow(conn: psycopg.Connection, definition: dict[str, Any]) -> int:
    return conn.execute(
        "INSERT INTO flow (key, version, definition, checksum) VALUES (%s, %s, %s, %s) "
        "RETURNING id",
        [definition["key"], definition["version"], Jsonb(definition), sha256_hex(definition)],
    ).fetchone()[0]


@dataclass(frozen=True)
class Accepted:
    request_id: uuid.UUID
    execution_id: uuid.UUID


def enqueue(
    conn: psycopg.Connection,
    flow_id: int,
    *,
    data: dict[str, Any] | None = None,
    transition_id: str = "go",
    state: str = "DRAFT",
    owner: str = "alice",
    scope: str = "acme",
    notify: bool = True,
) -> Accepted:
    """Create a request and accept `transition_id` on it, as the API does, in one transaction."""
    request_id, execution_id = uuid.uuid4(), uuid.uuid4()
    with conn.transaction():
        conn.execute(
            "INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version) "
            "VALUES (%s, %s, %s, %s, %s, %s, 2, 2)",
            [request_id, flow_id, owner, scope, Jsonb(data or {}), state],
        )
        conn.execute(
            "INSERT INTO execution (id, request_id, flow_id, transition_id, accepted_revision, "
            "actor_snapshot, dispatch_principal) VALUES (%s, %s, %s, %s, 2, %s, %s)",
            [
                execution_id,
                request_id,
                flow_id,
                transition_id,
                Jsonb({"subject": owner, "tenant": scope}),
                Jsonb({"subject": owner, "tenant": scope}),
            ],
        )
        conn.execute(
            "UPDATE request SET blocked_by_id = %s WHERE id = %s", [execution_id, request_id]
        )
        conn.execute(
            "INSERT INTO audit_event (request_id, execution_id, type, actor, payload) "
            "VALUES (%s, %s, 'TRANSITION_ACCEPTED', %s, %s)",
            [request_id, execution_id, owner, Jsonb({"transitionId": transition_id})],
        )
        if notify:
            conn.execute(sql.NOTIFY_WORK, {"execution_id": str(execution_id)})
    return Accepted(request_id, execution_id)


# ------------------------------------------------------------------------------
# Row readers
# ------------------------------------------------------------------------------
def execution_row(conn: psycopg.Connection, execution_id: uuid.UUID) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT *, lease_expires_at > clock_timestamp() AS lease_valid FROM execution "
            "WHERE id = %s",
            [execution_id],
        ).fetchone()


def request_row(conn: psycopg.Connection, request_id: uuid.UUID) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM request WHERE id = %s", [request_id]).fetchone()


def checkpoint_rows(conn: psycopg.Connection, execution_id: uuid.UUID) -> dict[str, dict]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT * FROM action_execution WHERE execution_id = %s ORDER BY sequence",
            [execution_id],
        ).fetchall()
    return {row["action_id"]: row for row in rows}


def audit_events(conn: psycopg.Connection, request_id: uuid.UUID) -> list[tuple[str, dict]]:
    rows = conn.execute(
        "SELECT type, payload FROM audit_event WHERE request_id = %s ORDER BY id", [request_id]
    ).fetchall()
    return [(row[0], row[1]) for row in rows]


def expire_lease(conn: psycopg.Connection, execution_id: uuid.UUID) -> None:
    """Wait, by the database clock, until the execution's current lease has expired."""
    wait_until(
        lambda: conn.execute(
            "SELECT lease_expires_at <= clock_timestamp() FROM execution WHERE id = %s",
            [execution_id],
        ).fetchone()[0],
        what="the lease to expire",
    )


# ------------------------------------------------------------------------------
# Adapters
# ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    input: dict[str, Any]
    external_key: str
    attempt: int
    execution_id: str
    action_id: str


Step = ActionResult | BaseException | Callable[[ActionContext], ActionResult]


@dataclass
class ScriptedAdapter:
    """Answers each call with the next step of its script (then `default`), recording calls."""

    script: list[Step] = field(default_factory=list)
    default: ActionResult = field(
        default_factory=lambda: ActionResult(outcome=Outcome.SUCCEEDED, output={"ok": True})
    )
    name: str = "test.scripted"
    fixed_effect: str | None = None
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._script = list(self.script)

    def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        with self._lock:
            self.calls.append(
                Call(
                    dict(ctx.input), ctx.external_key, ctx.attempt, ctx.execution_id, ctx.action_id
                )
            )
            step = self._script.pop(0) if self._script else self.default
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return step(ctx)
        return step


class GateAdapter:
    """Blocks each call until the test opens the gate (or the execution is cancelled).

    `entered` is set when a call is inside the adapter; `cancelled_seen` when a call saw its
    execution's cancellation. Records calls like ScriptedAdapter.
    """

    name = "test.gate"
    fixed_effect = None

    def __init__(self, result: ActionResult | None = None, *, watch_cancel: bool = True) -> None:
        self.result = result or ActionResult(outcome=Outcome.SUCCEEDED, output={"ok": True})
        self.watch_cancel = watch_cancel
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.cancelled_seen = threading.Event()
        self.calls: list[Call] = []
        self.contexts: list[ActionContext] = []
        self._lock = threading.Lock()

    def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        with self._lock:
            self.calls.append(
                Call(
                    dict(ctx.input), ctx.external_key, ctx.attempt, ctx.execution_id, ctx.action_id
                )
            )
            self.contexts.append(ctx)
        self.entered.set()
        deadline = time.monotonic() + DEFAULT_TIMEOUT * 2
        while not self.gate.wait(0.01):
            if self.watch_cancel and ctx.cancelled.is_set():
                self.cancelled_seen.set()
                return ActionResult(outcome=Outcome.TRANSIENT, error_code="INTERRUPTED")
            if time.monotonic() > deadline:
                return ActionResult(outcome=Outcome.TRANSIENT, error_code="GATE_TIMEOUT")
        return self.result


def ok(output: dict[str, Any] | None = None) -> ActionResult:
    return ActionResult(outcome=Outcome.SUCCEEDED, output=output if output is not None else {})


def transient(code: str = "HTTP_503", retry_after: float | None = None) -> ActionResult:
    return ActionResult(
        outcome=Outcome.TRANSIENT,
        error_code=code,
        error_detail="try later",
        retry_after=retry_after,
    )


def permanent(code: str = "HTTP_422") -> ActionResult:
    return ActionResult(outcome=Outcome.PERMANENT, error_code=code, error_detail="refused")


def unknown(code: str = "TIMEOUT_AFTER_SEND") -> ActionResult:
    return ActionResult(outcome=Outcome.UNKNOWN, error_code=code, error_detail="no answer")


def binding(
    capability: str,
    adapter: Any,
    *,
    effect: str = "READ_ONLY",
    version: int = 1,
    max_attempts: int = 3,
    input_schema: dict | None = None,
    output_schema: dict | None = None,
    timeout_seconds: float = 5,
) -> Binding:
    return Binding(
        contract=Contract(
            capability=capability,
            version=version,
            effect=effect,
            max_attempts=max_attempts,
            timeout_seconds=timeout_seconds,
            input_schema=input_schema or {"type": "object"},
            output_schema=output_schema or {"type": "object"},
        ),
        route=Route(capability=capability, version=version, adapter=adapter.name),
        adapter=adapter,
    )


def registry(*bindings: Binding) -> Registry:
    """A registry with these bindings, plus the simulation capabilities, in simulation mode."""
    return Registry(
        {b.contract.key: b for b in bindings},
        simulation={"NO_OP@1": NO_OP, **SIMULATION_BINDINGS},
        simulation_mode=True,
    )


# ------------------------------------------------------------------------------
# The worker's fenced writes, one holder at a time
# ------------------------------------------------------------------------------
def start_checkpoint(
    *,
    conn: psycopg.Connection,
    fence: Fence,
    action_id: str = "a",
    sequence: int = 0,
    capability: str = "A",
    capability_version: int = 1,
    effect: str = "READ_ONLY",
    input_hash: str = "0" * 64,
    previous_attempt: int = 0,
) -> int:
    """The runner's start write (checkpoints_start) for one holder; superseded raises, as there."""
    item = StartItem(
        fence,
        action_id,
        sequence,
        capability,
        capability_version,
        effect,
        input_hash,
        previous_attempt,
    )
    started = run_sync(conn, checkpoints_start(items=[item])).get(fence.execution_id)
    if started is None:
        raise ExecutionSuperseded(fence.execution_id, step=f"start {action_id}", token=fence.token)
    return started


def save_checkpoint(
    *,
    conn: psycopg.Connection,
    fence: Fence,
    action_id: str,
    attempt: int,
    output: dict[str, Any],
    effect: str = "NON_IDEMPOTENT_WRITE",
) -> None:
    """The runner's save write (checkpoints_succeed) for one holder; superseded raises."""
    item = SucceedItem(fence, action_id, attempt, output, effect)
    if fence.execution_id not in run_sync(conn, checkpoints_succeed(items=[item])):
        raise ExecutionSuperseded(fence.execution_id, step=f"save {action_id}", token=fence.token)


def finalize_one(*, conn: psycopg.Connection, item: FinalizeItem, actor: str = "t") -> int:
    """The runner's final commit (executions_finalize) for one holder; return the new revision.
    Superseded raises; a refusal for another reason fails the test naming it."""
    revision = run_sync(conn, executions_finalize(items=[item], actor=actor)).get(
        item.fence.execution_id
    )
    if revision is None:
        raise AssertionError(f"finalisation refused: {run_sync(conn, finalize_refusal(item=item))}")
    return revision


# ------------------------------------------------------------------------------
# Running one claim by hand
# ------------------------------------------------------------------------------
def runtime_for(
    dsn: str, reg: Registry, *, config: WorkerConfig = FAST, slots: int = 1
) -> OnLoop[LocalWorkerRuntime]:
    """An opened LocalWorkerRuntime on `dsn` resolving through `reg`, on a loop of its own, its
    SPI called as plain calls (close it when done)."""
    return on_loop(
        LocalWorkerRuntime(
            conninfo=dsn, config=config, resolve=reg.resolve, slots=slots, rng=random.Random(7)
        ),
        name="test-runtime-loop",
    )


def claim(
    conn: psycopg.Connection,
    owner: str,
    *,
    limit: int = 1,
    lease_seconds: float = 2.0,
    fairness: str = "queue",
) -> list[Dispatch]:
    return run_sync(
        conn,
        executions_claim(owner=owner, limit=limit, lease_seconds=lease_seconds, fairness=fairness),
    )


def package_of(found: Dispatch) -> ExecutionPackage:
    """The package of a claimed execution, without the snapshot the claim read: the run loads
    it under the fence, as the worker endpoint's does, so a test that changes the execution
    after claiming it sees the change (the scheduler's runs keep the claim's: running_scheduler)."""
    return ExecutionPackage(dataclasses.replace(found, snapshot=None))


def holding_of(found: Dispatch, cancelled: StopSignal | None = None) -> Holding:
    """A slot's hold on a claimed execution, with its own stop signal."""
    return Holding(found, cancelled=cancelled or StopSignal())


def dispatch_once(
    runtime: OnLoop[Any], package: ExecutionPackage, holding: Holding
) -> ExecutionResult:
    """The SPI's whole exchange for one package (runtime.dispatch_once), run on the runtime's
    loop and waited for here."""
    return runtime.run(worker_runtime.dispatch_once(runtime.target, package, holding))


def run_claim(
    runtime: OnLoop[Any], found: Dispatch, *, cancelled: threading.Event | None = None
) -> ExecutionResult:
    """Run one claimed execution through the SPI, as the worker endpoint does (on its loop; a
    scheduler slot hands a local runtime the holding itself: `runtime.dispatch_held`)."""
    return dispatch_once(runtime, package_of(found), holding_of(found, cancelled))


RUN_NEXT_LEASE_SECONDS = 30.0


def run_next(
    conn: psycopg.Connection, runtime: OnLoop[Any], owner: str = "worker-a", **kwargs: Any
) -> ExecutionResult:
    """Claim exactly one due execution and run it. Nothing renews its lease, so it is long enough
    for a run on a loaded machine (CI once saw a 2 s lease lapse before a run's first write); a
    test that needs the lease to run out claims with a short one itself (`claim`, then
    `expire_lease`)."""
    found = claim(conn, owner, lease_seconds=kwargs.pop("lease_seconds", RUN_NEXT_LEASE_SECONDS))
    assert len(found) == 1, f"expected one due execution, claimed {len(found)}"
    return run_claim(runtime, found[0], **kwargs)


def make_due(conn: psycopg.Connection, execution_ids: Iterable[uuid.UUID]) -> None:
    """Make RETRY_WAIT executions due now (instead of waiting out their backoff)."""
    conn.execute(
        "UPDATE execution SET next_attempt_at = clock_timestamp() "
        "WHERE id = ANY(%s) AND status = 'RETRY_WAIT'",
        [list(execution_ids)],
    )


def operator_resolves(
    conn: psycopg.Connection,
    execution_id: uuid.UUID,
    *,
    action_id: str,
    happened: bool,
    output: dict[str, Any] | None = None,
) -> int:
    """What an operator's "write happened" / "did not happen" does (reconciliation/services.py):
    lock request then execution, settle the uncertain checkpoint under token + 1, requeue under
    token + 2 and notify. Returns the execution's new token."""
    with conn.transaction():
        (request_id,) = conn.execute(
            sql.EXECUTION_REQUEST_OF, {"execution_id": execution_id}
        ).fetchone()
        conn.execute(sql.REQUEST_LOCK, {"request_id": request_id})
        _, status, token = conn.execute(
            sql.EXECUTION_LOCK, {"execution_id": execution_id}
        ).fetchone()
        assert status == "RECONCILIATION_REQUIRED", status
        settled = conn.execute(
            sql.RECONCILE_SETTLE_CHECKPOINT,
            {
                "status": "SUCCEEDED" if happened else "FAILED",
                "output": Jsonb(output) if happened else None,
                "error_code": None if happened else "REPLAY_AUTHORIZED",
                "error_detail": None,
                "token": token + 1,
                "execution_id": execution_id,
                "action_id": action_id,
            },
        ).fetchone()
        assert settled is not None
        (new_token,) = conn.execute(
            sql.RECONCILE_REQUEUE, {"execution_id": execution_id, "token": token}
        ).fetchone()
        conn.execute(sql.NOTIFY_WORK, {"execution_id": str(execution_id)})
    return new_token


@contextlib.contextmanager
def running_scheduler(
    dsn: str, reg: Registry, *, config: WorkerConfig = FAST, owner: str | None = None
) -> Iterator[Scheduler]:
    """A Scheduler with a LocalWorkerRuntime, running on an event loop in a thread until the
    block ends."""
    runtime = runtime_for(dsn, reg, config=config, slots=config.concurrency)
    scheduler = Scheduler(config=config, conninfo=dsn, runtime=runtime.target, owner=owner)
    done = runtime.loop.submit(scheduler.run())
    try:
        assert scheduler.running.wait(DEFAULT_TIMEOUT), "the scheduler did not start"
        yield scheduler
    finally:
        scheduler.request_stop()
        scheduler.request_stop()  # a second signal ends any drain at once
        try:
            done.result(DEFAULT_TIMEOUT)
        finally:
            runtime.close()


def status_of(conn: psycopg.Connection, execution_id: uuid.UUID) -> str:
    return conn.execute("SELECT status FROM execution WHERE id = %s", [execution_id]).fetchone()[0]


def statuses(conn: psycopg.Connection, execution_ids: Iterable[uuid.UUID]) -> list[str]:
    return [status_of(conn, eid) for eid in execution_ids]


# ------------------------------------------------------------------------------
# Real runworker processes
# ------------------------------------------------------------------------------
# Short leases and polls for process tests; any of them can be overridden per test.
PROCESS_SETTINGS = {
    "WORKER_ENABLED": "true",
    "SIMULATION_MODE": "true",
    "WORKER_CONCURRENCY": "2",
    "WORKER_BATCH": "2",
    "WORKER_POLL_MS": "100",
    "WORKER_LEASE_SECONDS": "2",
    "WORKER_RENEW_SECONDS": "0.5",
    "WORKER_DRAIN_SECONDS": "5",
    "WORKER_RETRY_BASE_SECONDS": "0.05",
    "WORKER_RETRY_MAX_SECONDS": "0.2",
    "LOG_LEVEL": "INFO",
}


def socket_ports(pid: int, remote_port: int) -> set[int]:
    """Local TCP ports of the sockets process `pid` holds open to `remote_port` (/proc).

    Only those: Linux lets connections to different servers share a local port, so a worker's
    thousand sockets to a provider can share ports with another process's PostgreSQL clients."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes and int(fields[2].rsplit(":", 1)[1], 16) == remote_port:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class WorkerProcess:
    """A `manage.py runworker` child process, its output in a file; only it is ever signalled."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        *,
        command_prefix: Sequence[str] = (),
        **overrides: str,
    ) -> None:
        """`command_prefix` runs before the command and execs it, in the same process (its
        pid is the worker's)."""
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [*command_prefix, *manage("runworker")],
            env={**env, **PROCESS_SETTINGS, **overrides},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.pid = self.process.pid

    def __enter__(self) -> "WorkerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines it wrote (other output is skipped)."""
        found = []
        for line in self.output().splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def wait_for_event(self, event: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        return wait_until(
            lambda: next((e for e in self.events() if e.get("event") == event), None),
            timeout=timeout,
            what=f"the worker to log {event!r}",
        )

    def wait_started(self, timeout: float = WORKER_START_SECONDS) -> dict[str, Any]:
        """Wait for its "worker started" line: its JSON event."""
        return self.wait_for_event("worker started", timeout=timeout)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self._log.flush()

    def wait_after_stopped(self, timeout: float = DEFAULT_TIMEOUT) -> tuple[int, float]:
        """Wait for it to exit: its exit status, and the seconds from its "worker stopped" line
        (that line's own time stamp) to its exit."""
        status = self.wait(timeout)
        exited = time.time()
        stopped = next((e for e in self.events() if e.get("event") == "worker stopped"), None)
        assert stopped is not None, self.output()
        logged = datetime.datetime.fromisoformat(stopped["ts"]).timestamp()
        return status, exited - logged

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # our own child, by its pid
            self.process.wait(DEFAULT_TIMEOUT)
        self._log.close()

    def backend_states(self, conn: psycopg.Connection) -> list[str]:
        """The state (pg_stat_activity) of every PostgreSQL backend this process is a client of,
        found by its sockets' ports, so nothing it opened escapes."""
        rows = conn.execute(
            "SELECT coalesce(state, '') FROM pg_stat_activity WHERE client_port = ANY(%s)",
            [sorted(socket_ports(self.pid, conn.info.port))],
        ).fetchall()
        return [row[0] for row in rows]

    def holds(self, conn: psycopg.Connection) -> list[uuid.UUID]:
        """Executions this process holds right now (its lease owner names its pid)."""
        rows = conn.execute(
            "SELECT id FROM execution WHERE status = 'RUNNING' AND lease_owner LIKE %s",
            [f"%:{self.pid}:%"],
        ).fetchall()
        return [row[0] for row in rows]


def metered_integrations(folder: Path, url: str, limits: str = "") -> str:
    """An INTEGRATIONS_FILE in `folder` declaring `metered.call@1`: a read POSTed by http.json to
    `url`, 3 attempts of at most 5 s; `limits` are more lines of its route. Returns its path."""
    path = folder / "integrations.toml"
    path.write_text(
        '[contracts."metered.call@1"]\n'
        'effect = "READ_ONLY"\n'
        "max_attempts = 3\n"
        "timeout_seconds = 5\n"
        "\n"
        '[routes."metered.call@1"]\n'
        'adapter = "http.json"\n'
        f'url = "{url}"\n'
        'method = "POST"\n' + limits
    )
    return str(path)
