"""Chaos: hundreds of executions through four `runworker` processes while everything fails.

On its own durable cluster (fsync and synchronous_commit on: an immediate restart must not lose a
commit the engine was told was durable), a three-action flow (READ_ONLY quote, IDEMPOTENT_WRITE
reserve, NON_IDEMPOTENT_WRITE charge) runs against a loopback provider that draws a fault for
every request from the seed: 503s on reads, drops after an idempotent write was applied, a 500
before or after a charge was applied, delays so that kills land mid-call. The charge endpoint
does not deduplicate, so a charge sent twice shows as two effects; it has a lookup by key, so
the workers' prober settles every uncertain charge the provider applied. The reserve route is
limited (`max_in_flight`). A quarter of the requests run a compensating flow instead (a charge
refused for good a quarter of the time releases its reservation).

During the storm: SIGKILLs of random workers (a supervisor restarts each, as an orchestrator
would), one SIGSTOP held until another worker took the stopped one's executions over,
`pg_terminate_backend` of every runtime-role connection, one `pg_ctl -m immediate` restart, and
transitions submitted through a real web process, each retried with its Idempotency-Key.

Then every invariant is checked: nothing lost or stuck, no charge applied twice, the route's
limit never passed, every SUCCEEDED request in its target state with the provider's output and
released, every case with its request blocked, one TRANSITION_COMPLETED per SUCCEEDED execution;
every reservation charged, released exactly once, or waiting with its charge uncertain, and no
release of one charged or never made; every applied uncertain charge resolved by system:prober,
nothing by a person, nothing twice, and every case left open a charge the provider never applied.
`CHAOS_SEED=<seed>` replays the same faults and storm schedule (thread timing still varies).
"""

import collections
import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import requests

from tests.support import tokens
from tests.support.cluster import Cluster, own_cluster
from tests.support.providers import JsonProvider, Received, Reply, drop, ok, slow, status
from tests.support.web import web_process
from tests.support.worker import WorkerProcess, action, create_flow, flow_definition, wait_until

pytestmark = [pytest.mark.process, pytest.mark.chaos]

SEED = int(os.environ.get("CHAOS_SEED") or secrets.randbits(32))
EXECUTIONS = 320
UNDOING = 80  # of them, on the compensating flow
CHARGES = ("/charges", "/u-charges")  # the two flows' charges, whose uncertain ones are probed
WORKERS = 4
STORM_SECONDS = 40.0  # seconds of faults; submissions are spread over the first three quarters
SETTLE_SECONDS = 100.0  # seconds for the calm after the storm to finish every execution
HTTP_TIMEOUT = 5.0  # seconds per API call
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED", "COMPENSATED")
PROBER = "system:prober"  # the actor of automatic probes and resolutions
RESERVES_AT_ONCE = 3  # the reserve route's max_in_flight (INTEGRATIONS.md#flow-control)

WORKER_SETTINGS = {
    "WORKER_CONCURRENCY": "6",
    "WORKER_BATCH": "6",
    "WORKER_POLL_MS": "200",
    "WORKER_LEASE_SECONDS": "3",
    "WORKER_RENEW_SECONDS": "1",
    "WORKER_DRAIN_SECONDS": "2",
    "WORKER_RETRY_BASE_SECONDS": "0.05",
    "WORKER_RETRY_MAX_SECONDS": "0.5",
    "LOG_LEVEL": "WARNING",
}


# ------------------------------------------------------------------------------
# The durable cluster and the provider
# ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A durable cluster of our own: an immediate restart must keep every commit."""
    with own_cluster("pg-chaos") as made:
        with psycopg.connect(made.admin_url) as conn:
            durable = conn.execute(
                "SELECT current_setting('fsync'), current_setting('synchronous_commit')"
            ).fetchone()
        assert durable == ("on", "on"), "the chaos cluster must be durable"
        yield made


class Faults:
    """Draws the provider's answer to each request from the seed, the path, the Idempotency-Key
    and how many times that key was sent to that path: the same seed, the same faults."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.drawn: collections.Counter[str] = collections.Counter()
        self._seen: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()

    def __call__(self, received: Received) -> Reply:
        key = received.headers.get("idempotency-key", "")
        with self._lock:
            self._seen[(received.path, key)] += 1
            nth = self._seen[(received.path, key)]
        rng = random.Random(f"{self.seed}:{received.path}:{key}:{nth}")
        roll, pause = rng.random(), rng.uniform(0.0, 0.4)
        if "/by-key/" in received.path:
            name, reply = "lookup", ok()
        elif received.path == "/quotes" and roll < 0.15:
            name, reply = "quote 503", status(503)
        elif received.path == "/quotes" and roll < 0.18:
            name, reply = "quote timeout", slow(1.6, apply=False)
        elif received.path == "/reserves" and roll < 0.10:
            name, reply = "reserve dropped after applying", drop(apply=True)
        elif received.path == "/reserves" and roll < 0.15:
            name, reply = "reserve 503", status(503)
        elif received.path == "/charges" and roll < 0.03:
            name, reply = "charge 500 before applying", status(500, apply=False)
        elif received.path == "/charges" and roll < 0.06:
            name, reply = "charge 500 after applying", status(500, apply=True)
        elif received.path == "/u-reserves" and roll < 0.10:
            name, reply = "reserve dropped after applying", drop(apply=True)
        elif received.path == "/u-reserves" and roll < 0.15:
            name, reply = "reserve 503", status(503)
        elif received.path == "/u-charges" and roll < 0.25:
            name, reply = "charge refused for good", status(402, apply=False)
        elif received.path == "/u-charges" and roll < 0.28:
            name, reply = "charge 500 after applying", status(500, apply=True)
        elif received.path == "/u-releases" and roll < 0.10:
            name, reply = "release dropped after applying", drop(apply=True)
        elif received.path == "/u-releases" and roll < 0.15:
            name, reply = "release 503", status(503)
        else:
            name, reply = "delayed", slow(pause)
        with self._lock:
            self.drawn[name] += 1
        return reply


@pytest.fixture
def provider() -> Iterator[tuple[JsonProvider, Faults]]:
    faults = Faults(SEED)
    with JsonProvider(choose=faults, repeats=("/charges", "/u-charges")) as double:
        yield double, faults


def _integrations(path: Path, provider: JsonProvider) -> str:
    def block(
        capability: str, effect: str, route: str, attempts: int, lookup: bool, limits: str = ""
    ) -> str:
        text = (
            f'[contracts."{capability}@1"]\n'
            f'effect = "{effect}"\n'
            f"max_attempts = {attempts}\n"
            "timeout_seconds = 1\n"
            f'[routes."{capability}@1"]\n'
            'adapter = "http.json"\n'
            f'url = "{provider.url(route)}"\n'
            'method = "POST"\n' + limits
        )
        if lookup:
            text += f'lookup_url = "{provider.url(route + "/by-key/{key}")}"\n'
        return text + "\n"

    path.write_text(
        block("pricing.quote", "READ_ONLY", "/quotes", 8, False)
        + block(
            "stock.reserve",
            "IDEMPOTENT_WRITE",
            "/reserves",
            8,
            False,
            f"max_in_flight = {RESERVES_AT_ONCE}\n",
        )
        + block("payments.charge", "NON_IDEMPOTENT_WRITE", "/charges", 1, True)
        + block("undo.reserve", "IDEMPOTENT_WRITE", "/u-reserves", 8, False)
        + block("undo.charge", "NON_IDEMPOTENT_WRITE", "/u-charges", 1, True)
        + block("undo.release", "IDEMPOTENT_WRITE", "/u-releases", 8, False)
        + block("undo.refund", "IDEMPOTENT_WRITE", "/u-refunds", 8, False)
    )
    return str(path)


# ------------------------------------------------------------------------------
# The storm
# ------------------------------------------------------------------------------
@dataclass
class Counts:
    kills: int = 0
    exits: int = 0  # workers that ended on their own (a lost database, a failed start)
    stops: int = 0
    terminated_backends: int = 0
    termination_rounds: int = 0
    restarts: int = 0
    api_attempts: int = 0
    api_retries: int = 0
    api_statuses: collections.Counter = field(default_factory=collections.Counter)


class Fleet:
    """Keeps WORKERS runworker processes alive: any that ends is replaced (as an orchestrator
    replaces a dead container). Only processes it started are ever signalled, by pid."""

    def __init__(self, env: dict[str, str], logs: Path, counts: Counts) -> None:
        self.env, self.logs, self.counts = env, logs, counts
        self.lock = threading.Lock()
        self.workers: list[WorkerProcess] = []
        self.ended: list[WorkerProcess] = []
        self.killed: set[int] = set()
        self._started = 0
        self._stop = threading.Event()
        for _ in range(WORKERS):
            self._spawn()
        self._thread = threading.Thread(target=self._supervise, name="fleet", daemon=True)
        self._thread.start()

    def _spawn(self) -> None:
        self._started += 1
        log = self.logs / f"worker-{self._started:03d}.log"
        self.workers.append(WorkerProcess(self.env, log, **WORKER_SETTINGS))

    def _supervise(self) -> None:
        while not self._stop.wait(0.2):
            with self.lock:
                for worker in [w for w in self.workers if w.process.poll() is not None]:
                    self.workers.remove(worker)
                    self.ended.append(worker)
                    if worker.pid not in self.killed:
                        self.counts.exits += 1
                    self._spawn()

    def pick(self, rng: random.Random) -> WorkerProcess:
        with self.lock:
            return rng.choice(self.workers)

    def kill(self, rng: random.Random) -> None:
        with self.lock:
            victim = rng.choice([w for w in self.workers if w.process.poll() is None])
            self.killed.add(victim.pid)
            victim.signal(signal.SIGKILL)  # Popen refuses to signal a process it has reaped
        self.counts.kills += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        with self.lock:
            for worker in self.workers:
                worker.signal(signal.SIGTERM)
            for worker in self.workers:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.wait(30)
                worker.close()
            for worker in self.ended:
                worker.close()


def _stopped_between_statements(worker: WorkerProcess, conn: psycopg.Connection) -> bool:
    """Whether the SIGSTOPped `worker` holds no transaction open: once the statements it had
    sent have finished, every backend it is a client of is idle, none idle in a transaction."""

    def settled_states() -> tuple[list[str]] | None:
        states = worker.backend_states(conn)
        return None if "active" in states else (states,)

    try:
        (states,) = wait_until(settled_states, timeout=5, what="its statements to finish")
    except AssertionError:  # one still running (blocked on a lock): not a moment to keep
        return False
    return all(state == "idle" for state in states)


def _stop_past_the_lease(fleet: Fleet, admin_url: str, counts: Counts) -> None:
    """SIGSTOP a worker that holds work; SIGCONT it once others have taken all of it over."""

    def stop_a_holder() -> tuple[WorkerProcess, list] | None:
        # Under the fleet's lock the supervisor cannot reap (and so replace) the one we pick.
        with fleet.lock, psycopg.connect(admin_url, connect_timeout=5) as conn:
            for worker in fleet.workers:
                held = worker.holds(conn)
                if held and worker.process.poll() is None:
                    worker.signal(signal.SIGSTOP)
                    if _stopped_between_statements(worker, conn):
                        return worker, held
                    # Stopped inside a transaction: the rows it locked stay locked (and
                    # unclaimable) until it runs again. Let it go on; pick again.
                    worker.signal(signal.SIGCONT)
        return None

    worker, held = wait_until(stop_a_holder, timeout=30, what="a worker holding executions")
    counts.stops += 1
    try:

        def taken_over() -> bool:
            with psycopg.connect(admin_url, connect_timeout=5) as conn:
                still = conn.execute(
                    "SELECT count(*) FROM execution WHERE id = ANY(%s) AND status = 'RUNNING' "
                    "AND lease_owner LIKE %s",
                    [held, f"%:{worker.pid}:%"],
                ).fetchone()[0]
            return still == 0

        wait_until(taken_over, timeout=60, what="the stopped worker's executions to move on")
    finally:
        with fleet.lock:
            if worker.process.poll() is None:
                worker.signal(signal.SIGCONT)


def _uncertain_charges(conn: psycopg.Connection) -> set[str]:
    """External keys of the charges waiting for an operator whose outcome is unknown."""
    return {
        row[0]
        for row in conn.execute(
            "SELECT c.external_key FROM execution e JOIN action_execution c "
            "ON c.execution_id = e.id AND c.action_id = 'charge' "
            "WHERE e.status = 'RECONCILIATION_REQUIRED' AND c.status IN ('RUNNING', 'UNKNOWN')"
        ).fetchall()
    }


def _history(conn: psycopg.Connection, double: JsonProvider, keys: set[str]) -> list[str]:
    """For each key: when the provider applied it and what the audit trail says, in order."""
    applied = {e.key: e.at for e in double.effects("/charges")}
    lines = []
    for key in sorted(keys):
        events = conn.execute(
            "SELECT a.created_at, a.type, a.actor, a.payload->>'happened', "
            "left(a.payload->>'detail', 80) "
            "FROM audit_event a JOIN action_execution c ON c.execution_id = a.execution_id "
            "WHERE c.external_key = %s AND c.action_id = 'charge' ORDER BY a.id",
            [key],
        ).fetchall()
        probe = conn.execute(
            "SELECT opened_at, next_probe_at, probes, outcome FROM case_probe WHERE key LIKE %s",
            [f"%{key}%"],
        ).fetchall()
        lines.append(
            f"{key} applied {applied.get(key)}; probe {probe}; "
            + "; ".join(
                f"{t.isoformat()} {kind} {actor} {a} {b}" for t, kind, actor, a, b in events
            )
        )
    return lines


def _submit(base: str, request_id: uuid.UUID, deadline: float, counts: Counts) -> str:
    """Accept `go` on the request, retrying with one Idempotency-Key until it is accepted."""
    headers = {
        "Authorization": f"Bearer {tokens.token(exp_in=3600)}",
        "Idempotency-Key": f"chaos-{request_id}",
    }
    body = {"transitionId": "go", "expectedRevision": 1}
    pause = 0.05
    while True:
        counts.api_attempts += 1
        try:
            response = requests.post(
                f"{base}/api/v1/requests/{request_id}/transitions",
                json=body,
                headers=headers,
                timeout=HTTP_TIMEOUT,
            )
            counts.api_statuses[response.status_code] += 1
            if response.status_code == 202:
                return response.json()["id"]
            # While the database is away the answer is a JSON 503, never a stack trace.
            assert response.status_code == 503, (response.status_code, response.text)
            assert response.json()["code"] == "DATABASE_UNAVAILABLE", response.text
        except requests.RequestException as exc:
            counts.api_statuses[type(exc).__name__] += 1
        assert time.monotonic() < deadline, f"request {request_id} was never accepted"
        counts.api_retries += 1
        time.sleep(pause)  # backoff between client retries, not a wait for a condition
        pause = min(pause * 2, 1.0)


def _compensating_flow() -> dict:
    """reserve, then charge; a failure after the reservation releases it (and would refund a
    charge made before a later failure)."""
    reserve = action("reserve", "undo.reserve", input={"amount": {"from": "/data/amount"}})
    reserve["compensate"] = {
        "capability": "undo.release",
        "version": 1,
        "input": {"reservation": {"from": "/actions/reserve"}},
    }
    charge = action("charge", "undo.charge", input={"amount": {"from": "/data/amount"}})
    charge["compensate"] = {
        "capability": "undo.refund",
        "version": 1,
        "input": {"charge": {"from": "/actions/charge"}},
    }
    flow = flow_definition(
        [reserve, charge],
        key="chaos-undo",
        updates=[{"path": "/charge", "from": "/actions/charge"}],
    )
    flow["transitions"][0]["onFailure"] = "compensate"
    return flow


def _compensation_invariants(executions: dict, checkpoints: dict, double: JsonProvider) -> dict:
    """Every reservation the provider applied is followed by a charge, or released exactly once,
    or waits for an operator with its charge uncertain; no release without its reservation or
    beside a charge. Returns the counts the note quotes."""
    reserves = collections.Counter(e.key for e in double.effects("/u-reserves"))
    charges = collections.Counter(e.key for e in double.effects("/u-charges"))
    releases = collections.Counter(e.key for e in double.effects("/u-releases"))
    release_calls = collections.Counter(
        r.headers.get("idempotency-key") for r in double.requests("/u-releases")
    )
    assert not double.effects("/u-refunds")  # nothing charged was ever failed afterwards
    assert all(n == 1 for n in charges.values()), charges  # no charge applied twice
    assert all(n == 1 for n in releases.values()), releases  # no release applied twice
    by_status = collections.Counter(row[2] for row in executions.values())
    assert set(by_status) <= {"SUCCEEDED", "COMPENSATED", "FAILED", "RECONCILIATION_REQUIRED"}
    for eid, (_, _, state, error_code, req_state, blocked_by, _, _) in executions.items():
        reserved = f"{eid}:reserve" in reserves
        charged = f"{eid}:charge" in charges
        released = f"{eid}:reserve:compensate" in releases
        assert not (charged and released), eid
        assert not released or reserved, eid  # no release for a reservation never made
        if state == "COMPENSATED":
            assert (reserved, charged, released) == (True, False, True), eid
            assert (req_state, blocked_by) == ("DRAFT", None), eid
            assert error_code, eid
            assert checkpoints[(eid, "reserve:compensate")] == "SUCCEEDED", eid
        elif state == "SUCCEEDED":
            assert (req_state, blocked_by, charged, released) == ("DONE", None, True, False), eid
        elif state == "FAILED":
            assert (blocked_by, charged, released) == (None, False, False), eid
            assert checkpoints.get((eid, "reserve")) in (None, "FAILED"), eid
        else:  # an operator's: the charge (or a reservation) uncertain, or an undo failed
            assert (req_state, blocked_by) == ("DRAFT", eid), eid
            if reserved and not charged and not released:
                uncertain = {checkpoints.get((eid, a)) for a in ("reserve", "charge")}
                assert uncertain & {"RUNNING", "UNKNOWN"} or checkpoints.get(
                    (eid, "reserve:compensate")
                ) in ("FAILED", "RUNNING", "UNKNOWN"), (eid, uncertain)
        if reserved and state != "RECONCILIATION_REQUIRED":
            assert charged or released, eid  # every reservation charged or released
    return {
        "executions": len(executions),
        "by_status": dict(sorted(by_status.items())),
        "charges_refused": sum(
            1 for eid in executions if checkpoints.get((eid, "charge")) == "FAILED"
        ),
        "reserves_applied": len(reserves),
        "charges_applied": len(charges),
        "releases_applied": len(releases),
        "release_requests": sum(release_calls.values()),
        "releases_doubled": sum(1 for n in releases.values() if n > 1),
        "reservations_left_unreleased": sum(
            1
            for eid in executions
            if f"{eid}:reserve" in reserves
            and f"{eid}:charge" not in charges
            and f"{eid}:reserve:compensate" not in releases
        ),
    }


def test_chaos__nothing_lost_nothing_charged_twice(cluster, provider, tmp_path, capsys):
    double, faults = provider
    rng = random.Random(SEED)
    counts = Counts()
    env = {**cluster.env, "INTEGRATIONS_FILE": _integrations(tmp_path / "int.toml", double)}
    started = time.monotonic()

    flow = flow_definition(
        [
            action("quote", "pricing.quote", input={"amount": {"from": "/data/amount"}}),
            action("reserve", "stock.reserve", input={"quote": {"from": "/actions/quote/id"}}),
            action(
                "charge",
                "payments.charge",
                input={"amount": {"from": "/data/amount"}, "quote": {"from": "/actions/quote/id"}},
            ),
        ],
        key="chaos",
        updates=[
            {"path": "/quote", "from": "/actions/quote"},
            {"path": "/reservation", "from": "/actions/reserve"},
            {"path": "/charge", "from": "/actions/charge"},
        ],
    )
    request_ids = [uuid.uuid4() for _ in range(EXECUTIONS)]
    undoing = set(rng.sample(request_ids, UNDOING))  # requests of the compensating flow
    with psycopg.connect(cluster.env["DATABASE_URL"], autocommit=True) as conn:
        flow_id = create_flow(conn, flow)
        undo_flow_id = create_flow(conn, _compensating_flow())
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO request (id, flow_id, owner, scope, data, state, revision, version) "
                "VALUES (%s, %s, 'alice', 'acme', %s, 'DRAFT', 1, 1)",
                [
                    (
                        rid,
                        undo_flow_id if rid in undoing else flow_id,
                        json.dumps({"amount": n + 1}),
                    )
                    for n, rid in enumerate(request_ids)
                ],
            )

    submitted: dict[uuid.UUID, str] = {}
    with web_process(env, tmp_path / "web.log") as base:
        fleet = Fleet(env, tmp_path, counts)
        try:
            # -- submissions, from four client threads, across the storm --------------------
            storm_end = time.monotonic() + STORM_SECONDS
            queue = collections.deque(request_ids)
            problems: list[BaseException] = []

            def client() -> None:
                spacing = STORM_SECONDS * 0.75 / (EXECUTIONS / 4)
                try:
                    while True:
                        try:
                            request_id = queue.popleft()
                        except IndexError:
                            return
                        submitted[request_id] = _submit(
                            base, request_id, time.monotonic() + SETTLE_SECONDS, counts
                        )
                        time.sleep(spacing)  # pacing the load, not waiting for a condition
                except BaseException as exc:
                    problems.append(exc)

            clients = [threading.Thread(target=client, daemon=True) for _ in range(4)]
            for thread in clients:
                thread.start()

            # -- the storm: a seeded schedule of faults -------------------------------------
            schedule = sorted(
                [(rng.uniform(2, STORM_SECONDS - 2), "kill") for _ in range(10)]
                + [(rng.uniform(3, STORM_SECONDS - 4), "terminate") for _ in range(6)]
                + [(rng.uniform(8, 14), "stop"), (rng.uniform(STORM_SECONDS / 2, 30), "restart")]
            )
            origin = time.monotonic()
            for at, fault in schedule:
                pause = origin + at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)  # the storm's own clock, not a wait for a condition
                if fault == "kill":
                    fleet.kill(rng)
                elif fault == "terminate":
                    with contextlib.suppress(psycopg.OperationalError):  # mid-restart
                        counts.terminated_backends += cluster.terminate_runtime_backends()
                        counts.termination_rounds += 1
                elif fault == "stop":
                    _stop_past_the_lease(fleet, cluster.admin_url, counts)
                else:
                    cluster.crash_restart()
                    counts.restarts += 1
            storm_end = time.monotonic()

            for thread in clients:
                thread.join(SETTLE_SECONDS)
            assert not problems, problems
            assert len(submitted) == EXECUTIONS

            # -- the calm: every execution ends, or waits for an operator; the workers' prober
            # settles every uncertain charge the provider applied (its lookup says so) -------
            with psycopg.connect(cluster.admin_url, autocommit=True) as conn:

                def settled() -> bool:
                    (open_,) = conn.execute(
                        "SELECT count(*) FROM execution WHERE status NOT IN "
                        "('SUCCEEDED', 'FAILED', 'CANCELLED', 'COMPENSATED', "
                        "'RECONCILIATION_REQUIRED')"
                    ).fetchone()
                    applied = {e.key for p in CHARGES for e in double.effects(p)}
                    return open_ == 0 and not applied & _uncertain_charges(conn)

                try:
                    wait_until(settled, timeout=SETTLE_SECONDS, what="every execution to settle")
                except AssertionError:
                    left = conn.execute(
                        "SELECT status, count(*) FROM execution GROUP BY status"
                    ).fetchall()
                    applied = {e.key for e in double.effects("/charges")}
                    probes = conn.execute(
                        "SELECT outcome, probes, finished_at IS NULL, count(*) FROM case_probe "
                        "GROUP BY 1, 2, 3"
                    ).fetchall()
                    unsettled = applied & _uncertain_charges(conn)
                    raise AssertionError(
                        f"seed {SEED}: executions by status {left}; uncertain charges the "
                        f"provider applied {sorted(unsettled)}; probes {probes}; "
                        f"their history {_history(conn, double, unsettled)}"
                    ) from None
            settled_at = time.monotonic()
        finally:
            fleet.close()

    # -- invariants ---------------------------------------------------------------------------
    with psycopg.connect(cluster.admin_url, autocommit=True) as conn:
        executions = {
            row[0]: row
            for row in conn.execute(
                "SELECT e.id, e.request_id, e.status, e.error_code, r.state, r.blocked_by_id, "
                "r.data, e.attempts FROM execution e JOIN request r ON r.id = e.request_id"
            ).fetchall()
        }
        completed = collections.Counter(
            row[0]
            for row in conn.execute(
                "SELECT execution_id FROM audit_event WHERE type = 'TRANSITION_COMPLETED'"
            ).fetchall()
        )
        checkpoints = {
            (row[0], row[1]): row[2]
            for row in conn.execute(
                "SELECT execution_id, action_id, status FROM action_execution"
            ).fetchall()
        }
        # Every charge that went to an operator's desk, and every resolution of one.
        went_uncertain = {
            row[0]
            for row in conn.execute(
                "SELECT execution_id FROM audit_event WHERE type = 'RECONCILIATION_REQUIRED' "
                "AND payload->>'actionId' = 'charge'"
            ).fetchall()
        }
        resolutions = conn.execute(
            "SELECT a.execution_id, a.actor, a.payload->>'resolution', a.payload->>'actionId', "
            "c.output FROM audit_event a JOIN action_execution c "
            "ON c.execution_id = a.execution_id AND c.action_id = a.payload->>'actionId' "
            "WHERE a.type = 'RECONCILIATION_RESOLVED'"
        ).fetchall()
        probes_asked = conn.execute(
            "SELECT count(*) FROM audit_event WHERE type = 'RECONCILIATION_EVIDENCE' "
            "AND actor = 'system:prober'"
        ).fetchone()[0]

    undo_ids = {eid for eid, row in executions.items() if row[1] in undoing}
    undo_counts = _compensation_invariants(
        {eid: executions[eid] for eid in undo_ids}, checkpoints, double
    )
    executions = {eid: row for eid, row in executions.items() if eid not in undo_ids}
    by_status = collections.Counter(row[2] for row in executions.values())
    charges = collections.Counter(e.key for e in double.effects("/charges"))
    charge_output = {e.key: e.response for e in double.effects("/charges")}
    reserve_output = {e.key: e.response for e in double.effects("/reserves")}
    summary = {
        "seed": SEED,
        "executions": len(executions),
        "by_status": dict(sorted(by_status.items())),
        "kills": counts.kills,
        "worker_exits": counts.exits,
        "stops": counts.stops,
        "terminated_backends": counts.terminated_backends,
        "termination_rounds": counts.termination_rounds,
        "restarts": counts.restarts,
        "api_attempts": counts.api_attempts,
        "api_retries": counts.api_retries,
        "api_answers": {str(k): v for k, v in sorted(counts.api_statuses.items(), key=str)},
        "provider_calls": double.calls(),
        "reserves_most_at_once": double.most_at_once("/reserves"),
        "charges_applied": sum(charges.values()),
        "faults_drawn": dict(sorted(faults.drawn.items())),
        "charges_uncertain": len(went_uncertain - undo_ids),
        "uncertain_applied": len({eid for eid in went_uncertain if f"{eid}:charge" in charges}),
        "probes": probes_asked,
        "resolved_by_prober": sum(1 for r in resolutions if r[1] == PROBER),
        "storm_seconds": round(storm_end - origin, 1),
        "settle_seconds": round(settled_at - storm_end, 1),
        "total_seconds": round(time.monotonic() - started, 1),
        "compensating_flow": undo_counts,
    }
    with capsys.disabled():
        print("\nchaos:", json.dumps(summary))

    # Nothing lost: exactly one execution per submitted request, the one the API answered.
    assert len(executions) + len(undo_ids) == EXECUTIONS
    assert {str(eid) for eid in (*executions, *undo_ids)} == set(submitted.values())
    assert {row[1] for row in executions.values()} == set(request_ids) - undoing
    # Nothing stuck: final, or waiting for an operator.
    assert set(by_status) <= {*FINAL, "RECONCILIATION_REQUIRED"}, by_status
    # The limited route's limit held at the provider through every fault.
    assert double.most_at_once("/reserves") <= RESERVES_AT_ONCE, summary
    # No charge applied twice (the provider does not deduplicate).
    twice = {key: n for key, n in charges.items() if n > 1}
    assert not twice, f"charges applied more than once (seed {SEED}): {twice}"
    assert all(key.endswith(":charge") for key in charges)
    assert {str(key.split(":")[0]) for key in charges} <= {str(eid) for eid in executions}

    for eid, (_, _, state, error_code, req_state, blocked_by, data, _) in executions.items():
        charge_key, reserve_key = f"{eid}:charge", f"{eid}:reserve"
        if state == "SUCCEEDED":
            assert (req_state, blocked_by) == ("DONE", None), eid
            assert data["charge"] == charge_output[charge_key], eid
            assert data["reservation"] == reserve_output[reserve_key], eid
            assert charges[charge_key] == 1, eid
            assert completed[eid] == 1, eid
        else:
            assert completed[eid] == 0, (eid, state)
            assert req_state == "DRAFT", (eid, state)
        if state == "RECONCILIATION_REQUIRED":
            assert blocked_by == eid, eid
            assert error_code, eid
        if state == "FAILED":
            assert blocked_by is None, eid
            # Released as FAILED only when no write succeeded or is uncertain.
            assert charge_key not in charges, eid
            assert checkpoints.get((eid, "reserve")) in (None, "FAILED"), eid
            assert checkpoints.get((eid, "charge")) is None, eid
    assert set(completed) <= set(executions) | undo_ids
    # The prober: every uncertain charge the provider applied was settled "happened" by
    # system:prober, with the provider's own output; no person resolved anything; nothing was
    # resolved twice or against the provider's ledger; what it left open was never applied.
    assert {r[1] for r in resolutions} <= {PROBER}, resolutions
    resolved = collections.Counter((r[0], r[3]) for r in resolutions)
    assert all(n == 1 for n in resolved.values()), resolved
    undo_charges = collections.Counter(e.key for e in double.effects("/u-charges"))
    for eid, _, resolution, action_id, output in resolutions:
        key = f"{eid}:{action_id}"
        assert (action_id, resolution) == ("charge", "WRITE_HAPPENED"), (eid, resolution)
        assert (undo_charges if eid in undo_ids else charges)[key] == 1, (eid, output)
        if eid not in undo_ids:
            assert output == charge_output[key], (eid, output)
    for eid in went_uncertain - undo_ids:
        applied = f"{eid}:charge" in charges
        assert ((eid, "charge") in resolved) == applied, (eid, applied)
        if applied:
            assert executions[eid][2] == "SUCCEEDED", (eid, executions[eid][2])
        else:
            assert executions[eid][2] == "RECONCILIATION_REQUIRED", (eid, executions[eid][2])
    # The storm really happened.
    assert counts.kills >= 10 and counts.stops == 1 and counts.restarts == 1
    assert counts.terminated_backends > 0
    # And the work really reached the provider (a provider that never answers fails everything,
    # which every invariant above would allow): each retried action has 8 attempts against at
    # most 18 % faults and no charge of the first flow is refused, so none of its executions
    # fails, and one waits for an operator only on a charge that went uncertain.
    assert set(by_status) <= {"SUCCEEDED", "RECONCILIATION_REQUIRED"}, summary
    assert {eid for eid, row in executions.items() if row[2] != "SUCCEEDED"} <= went_uncertain
    assert set(undo_counts["by_status"]) <= {"SUCCEEDED", "COMPENSATED", "RECONCILIATION_REQUIRED"}
    assert by_status["SUCCEEDED"] >= 0.8 * len(executions), summary
