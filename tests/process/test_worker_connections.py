"""A runworker process uses at most 4 PostgreSQL connections whatever WORKER_CONCURRENCY.

Every backend the process holds is counted, found by its client port among the process's own
sockets (/proc), so nothing it opens escapes the count: claim and LISTEN, heartbeat, the shared
write connections, Django's own, the prober's steps. The count is taken while all 50 slots wait
inside an action, after they are done, and every few milliseconds throughout, through the
prober's passes once slots are free.
"""

import signal
import threading
import uuid

import psycopg
import pytest

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
SAMPLE_SECONDS = 0.005  # seconds between two counts of the process's backends


def backends_of(conn: psycopg.Connection, pid: int) -> int:
    """PostgreSQL backends whose client is a socket of process `pid`: every one, the prober's
    included (it borrows the worker's shared connections)."""
    ports = sorted(socket_ports(pid, conn.info.port))
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)", [ports]
    ).fetchone()[0]


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


def test_runworker__holds_at_most_four_connections_with_fifty_slots_busy(
    process_env, runtime_conn, runtime_dsn, tmp_path
):
    flow = create_flow(
        runtime_conn,
        flow_definition([action("nap", "SIM_SLEEP", input={"seconds": SLEEP_SECONDS})]),
    )
    case = open_case(runtime_conn, flow)  # the prober has work: a probe to run and settle
    accepted = [enqueue(runtime_conn, flow).execution_id for _ in range(CONCURRENCY)]

    with WorkerProcess(
        process_env,
        tmp_path / "worker.log",
        WORKER_CONCURRENCY=str(CONCURRENCY),
        WORKER_BATCH="10",
        WORKER_LEASE_SECONDS="10",
        WORKER_RENEW_SECONDS="2",
    ) as worker:
        with Sampler(runtime_dsn, worker.pid) as sampler:
            wait_until(
                lambda: running_actions(runtime_conn, accepted) == CONCURRENCY,
                timeout=60,
                what="every slot to be inside its action",
            )
            busy = backends_of(runtime_conn, worker.pid)
            wait_until(
                lambda: statuses(runtime_conn, accepted) == ["SUCCEEDED"] * CONCURRENCY,
                timeout=120,
                what="every execution to succeed",
            )
            after = backends_of(runtime_conn, worker.pid)
            # Slots are free now, so the prober makes its passes: it settles the open case.
            wait_until(
                lambda: probe_outcome(runtime_conn, case) == "no-lookup",
                timeout=30,
                what="the prober to settle the open case's probe",
            )
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()

    assert 1 <= busy <= MAX_CONNECTIONS, busy
    assert 1 <= after <= MAX_CONNECTIONS, after
    assert 1 <= sampler.most <= MAX_CONNECTIONS, sampler.most  # at every moment sampled


class Sampler(threading.Thread):
    """Counts the process's backends every SAMPLE_SECONDS until the block ends; keeps the most."""

    def __init__(self, dsn: str, pid: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.pid = dsn, pid
        self.most = 0
        self.done = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.done.wait(SAMPLE_SECONDS):
                self.most = max(self.most, backends_of(conn, self.pid))

    def __enter__(self) -> "Sampler":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join(timeout=10)
