"""A runworker process uses at most 4 PostgreSQL connections whatever WORKER_CONCURRENCY, directly
and behind PgBouncer in transaction pooling mode.

Every connection the process holds is counted, found by its client port among the process's own
sockets (/proc), so nothing it opens escapes the count: claim and LISTEN, heartbeat, the shared
write connections, Django's own, the prober's. Directly, each is a PostgreSQL backend; behind
PgBouncer, the sockets to PgBouncer and the backends of the direct WORKER_LISTEN_DATABASE_URL (the
claiming connection, which LISTENs there) are counted together. The count is taken while all 50
slots wait inside an action, after they are done, and every few milliseconds throughout, through
the prober's passes once slots are free. Afterwards one more execution is picked up: by its
notification where the worker LISTENs (the poll is a minute away), by polling where it cannot.
"""

import signal
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from tests.support.pgbouncer import PgBouncer, pgbouncer_missing, running_pgbouncer
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    flow_definition,
    socket_ports,
    statuses,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

CONCURRENCY = 50
MAX_CONNECTIONS = 4  # per runworker process, whatever its concurrency
SLEEP_SECONDS = 4  # each action holds its slot this long: long enough to count them all busy
SAMPLE_SECONDS = 0.005  # seconds between two counts of the process's connections
POOL_SIZE = 5  # server connections PgBouncer may open
LISTEN_POLL_MS = "60000"  # where the worker LISTENs: a pickup within the test is a notification
PICKUP_TIMEOUT = 20  # seconds for the last execution to be picked up and run: under the poll


def backends_of(conn: psycopg.Connection, pid: int) -> int:
    """PostgreSQL backends whose client is a socket of process `pid`: every direct one, the
    prober's included."""
    ports = sorted(socket_ports(pid, conn.info.port))
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)", [ports]
    ).fetchone()[0]


class Counter:
    """The connections of one worker process: direct backends, and its sockets to PgBouncer."""

    def __init__(self, pid: int, bouncer: PgBouncer | None) -> None:
        self.pid = pid
        self.bouncer_port = bouncer.port if bouncer is not None else None

    def count(self, conn: psycopg.Connection) -> tuple[int, int]:
        """(direct backends, connections to PgBouncer)."""
        pooled = 0 if self.bouncer_port is None else len(socket_ports(self.pid, self.bouncer_port))
        return backends_of(conn, self.pid), pooled


def running_actions(conn: psycopg.Connection, execution_ids: list) -> int:
    return conn.execute(
        "SELECT count(*) FROM action_execution WHERE status = 'RUNNING' AND execution_id = ANY(%s)",
        [execution_ids],
    ).fetchone()[0]


def open_case(conn: psycopg.Connection, flow: int) -> uuid.UUID:
    """An execution waiting for an operator with one uncertain write (SIM_SLEEP has no lookup, so
    the prober settles its probe as "no-lookup")."""
    execution_id = enqueue(conn, flow).execution_id
    conn.execute(
        "UPDATE execution SET status = 'RECONCILIATION_REQUIRED', error_code = 'UNCERTAIN_WRITE',"
        " finished_at = clock_timestamp(), fencing_token = 1, attempts = 1 WHERE id = %s",
        [execution_id],
    )
    conn.execute(
        "INSERT INTO action_execution (execution_id, action_id, sequence, capability,"
        " capability_version, effect, status, input_hash, external_key, attempt, fencing_token)"
        " VALUES (%s, 'nap', 0, 'SIM_SLEEP', 1, 'NON_IDEMPOTENT_WRITE', 'RUNNING', %s, %s, 1, 1)",
        [execution_id, "0" * 64, f"{execution_id}:nap"],
    )
    return execution_id


def probe_outcome(conn: psycopg.Connection, execution_id: uuid.UUID) -> str | None:
    row = conn.execute(
        "SELECT outcome FROM case_probe WHERE execution_id = %s AND finished_at IS NOT NULL",
        [execution_id],
    ).fetchone()
    return row and row[0]


@dataclass(frozen=True)
class Mode:
    name: str
    bouncer: PgBouncer | None  # the PgBouncer the worker goes through, if any
    env: dict[str, str]  # the worker's environment for it


@pytest.fixture
def mode(request, runtime_dsn) -> Iterator[Mode]:
    """The mode under test: directly, or through PgBouncer, listening directly or polling."""
    if request.param == "direct":
        yield Mode(request.param, None, {"WORKER_POLL_MS": LISTEN_POLL_MS})
        return
    missing = pgbouncer_missing()
    if missing:
        pytest.skip(missing)
    with running_pgbouncer(runtime_dsn, pool_size=POOL_SIZE) as bouncer:
        env = {"DATABASE_URL": bouncer.dsn(runtime_dsn), "DATABASE_POOLER": "transaction"}
        if request.param == "pgbouncer, listening":
            env |= {"WORKER_LISTEN_DATABASE_URL": runtime_dsn, "WORKER_POLL_MS": LISTEN_POLL_MS}
        yield Mode(request.param, bouncer, env)


# Direct: one backend claims and LISTENs, the rest are the shared ones and the prober's. Behind
# PgBouncer: the claiming connection LISTENs directly (one backend) or, without a listen URL, goes
# through PgBouncer with the rest, and the worker polls.
DIRECT_BACKENDS = {"direct": None, "pgbouncer, listening": 1, "pgbouncer, polling": 0}


@pytest.mark.parametrize("mode", list(DIRECT_BACKENDS), indirect=True)
def test_runworker__holds_at_most_four_connections_with_fifty_slots_busy(
    process_env, runtime_conn, runtime_dsn, tmp_path, mode
):
    flow = create_flow(
        runtime_conn,
        flow_definition([action("nap", "SIM_SLEEP", input={"seconds": SLEEP_SECONDS})]),
    )
    case = open_case(runtime_conn, flow)  # the prober has work: a probe to run and settle
    accepted = [enqueue(runtime_conn, flow).execution_id for _ in range(CONCURRENCY)]

    with WorkerProcess(
        {**process_env, **mode.env},
        tmp_path / "worker.log",
        WORKER_CONCURRENCY=str(CONCURRENCY),
        WORKER_BATCH="10",
        WORKER_LEASE_SECONDS="10",
        WORKER_RENEW_SECONDS="2",
    ) as worker:
        counter = Counter(worker.pid, mode.bouncer)
        with Sampler(runtime_dsn, counter) as sampler:
            wait_until(
                lambda: running_actions(runtime_conn, accepted) == CONCURRENCY,
                timeout=60,
                what="every slot to be inside its action",
            )
            busy = counter.count(runtime_conn)
            wait_until(
                lambda: statuses(runtime_conn, accepted) == ["SUCCEEDED"] * CONCURRENCY,
                timeout=120,
                what="every execution to succeed",
            )
            after = counter.count(runtime_conn)
            # Slots are free now, so the prober makes its passes: it settles the open case.
            wait_until(
                lambda: probe_outcome(runtime_conn, case) == "no-lookup",
                timeout=30,
                what="the prober to settle the open case's probe",
            )
            last = enqueue(runtime_conn, flow).execution_id
            wait_until(
                lambda: statuses(runtime_conn, [last]) == ["SUCCEEDED"],
                timeout=PICKUP_TIMEOUT,
                what="the last execution to be picked up and succeed",
            )
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()

    for direct, pooled in (busy, after, sampler.most):
        assert 1 <= direct + pooled <= MAX_CONNECTIONS, (direct, pooled)
    expected_direct = DIRECT_BACKENDS[mode.name]
    if expected_direct is not None:
        assert busy[0] == after[0] == sampler.most_direct == expected_direct, (busy, after)
    assert ("no LISTEN" in worker.output()) is (mode.name == "pgbouncer, polling")


class Sampler(threading.Thread):
    """Counts the process's connections every SAMPLE_SECONDS until the block ends; keeps the
    count of the moment with the most (direct backends, connections to PgBouncer), and the most
    direct backends at any moment."""

    def __init__(self, dsn: str, counter: Counter) -> None:
        super().__init__(daemon=True)
        self.dsn, self.counter = dsn, counter
        self.most = (0, 0)
        self.most_direct = 0
        self.done = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.done.wait(SAMPLE_SECONDS):
                counted = self.counter.count(conn)
                self.most = max(self.most, counted, key=sum)
                self.most_direct = max(self.most_direct, counted[0])

    def __enter__(self) -> "Sampler":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join(timeout=10)
