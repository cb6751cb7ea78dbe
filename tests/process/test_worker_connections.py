"""A runworker process uses at most 4 PostgreSQL connections whatever WORKER_CONCURRENCY.

Every backend the process holds is counted, found by its client port among the process's own
sockets (/proc), so nothing it opens escapes the count: claim and LISTEN, heartbeat, the shared
write connections, Django's own. The count is taken while all 50 slots wait inside an action.
"""

import os
import signal
from pathlib import Path

import psycopg
import pytest

from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    flow_definition,
    statuses,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

CONCURRENCY = 50
MAX_CONNECTIONS = 4  # per runworker process, whatever its concurrency
SLEEP_SECONDS = 4  # each action holds its slot this long: long enough to count them all busy


def _socket_ports(pid: int) -> set[int]:
    """Local TCP ports of the sockets process `pid` holds open."""
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
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def backends_of(conn: psycopg.Connection, pid: int) -> int:
    """PostgreSQL backends whose client is a socket of process `pid`, but for its prober's (a
    connection open only during a probe pass, while a slot is free: README, "Connections")."""
    ports = sorted(_socket_ports(pid))
    return conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)"
        " AND application_name IS DISTINCT FROM 'orquestador-prober'",
        [ports],
    ).fetchone()[0]


def running_actions(conn: psycopg.Connection, execution_ids: list) -> int:
    return conn.execute(
        "SELECT count(*) FROM action_execution WHERE status = 'RUNNING' AND execution_id = ANY(%s)",
        [execution_ids],
    ).fetchone()[0]


def test_runworker__holds_at_most_four_connections_with_fifty_slots_busy(
    process_env, runtime_conn, tmp_path
):
    flow = create_flow(
        runtime_conn,
        flow_definition([action("nap", "SIM_SLEEP", input={"seconds": SLEEP_SECONDS})]),
    )
    accepted = [enqueue(runtime_conn, flow).execution_id for _ in range(CONCURRENCY)]

    with WorkerProcess(
        process_env,
        tmp_path / "worker.log",
        WORKER_CONCURRENCY=str(CONCURRENCY),
        WORKER_BATCH="10",
        WORKER_LEASE_SECONDS="10",
        WORKER_RENEW_SECONDS="2",
    ) as worker:
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
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.output()

    assert 1 <= busy <= MAX_CONNECTIONS, busy
    assert 1 <= after <= MAX_CONNECTIONS, after
