"""A worker paused past its lease sends nothing when it wakes (docs/adr/0002-fencing-tokens.md).

A runworker pauses itself (SIGSTOP, as a stopped process, a swapped-out host or a frozen VM
would) at the fault point right after an action's RUNNING checkpoint committed, before its call
(executions/queue/faultpoints.py, reachable only under settings_test.py). Its lease runs out and
another worker takes the execution over: an uncertain charge goes to an operator, a limited
route's reservation is sent again by the new holder. Then the paused one is continued. Its
heartbeat has not yet told it the lease is gone, yet it must not send its call: a charge sent
then lands behind the operator's back, and a reservation exceeds the route's `max_in_flight`.
"""

import signal
from pathlib import Path

import pytest

from executions.queue import faultpoints
from tests.support.providers import JsonProvider, slow
from tests.support.worker import (
    WorkerProcess,
    action,
    create_flow,
    enqueue,
    execution_row,
    flow_definition,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

DEADLINE = 30.0  # seconds for each step of a round to happen
HELD_SECONDS = 2.5  # the new holder's reservation, held by the provider while the paused one wakes
WORKER = {
    "WORKER_CONCURRENCY": "1",
    "WORKER_BATCH": "1",
    "WORKER_LEASE_SECONDS": "6",  # a call may last at most half of it: 3 s
    "WORKER_RENEW_SECONDS": "1",
}


@pytest.fixture
def provider():
    with JsonProvider() as double:
        yield double


def _integrations(path: Path, provider: JsonProvider) -> str:
    path.write_text(
        '[contracts."pause.charge@1"]\neffect = "NON_IDEMPOTENT_WRITE"\nmax_attempts = 1\n'
        'timeout_seconds = 3\n[routes."pause.charge@1"]\nadapter = "http.json"\n'
        f'url = "{provider.url("/charge")}"\nmethod = "POST"\n\n'
        '[contracts."pause.reserve@1"]\neffect = "IDEMPOTENT_WRITE"\nmax_attempts = 3\n'
        'timeout_seconds = 3\n[routes."pause.reserve@1"]\nadapter = "http.json"\n'
        f'url = "{provider.url("/reserve")}"\nmethod = "POST"\nmax_in_flight = 1\n'
    )
    return str(path)


def _stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (its state in /proc is T)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize(
    "route,capability,ends",
    [("/charge", "pause.charge", "RECONCILIATION_REQUIRED"), ("/reserve", "pause.reserve", None)],
)
def test_worker__paused_past_its_lease_sends_nothing_when_continued(
    route, capability, ends, process_env, runtime_conn, provider, tmp_path
):
    env = {**process_env, "INTEGRATIONS_FILE": _integrations(tmp_path / "i.toml", provider)}
    flow_id = create_flow(
        runtime_conn,
        flow_definition([action("target", capability)], key=f"pause-{route.strip('/')}"),
    )
    paused_env = {
        **env,
        "DJANGO_SETTINGS_MODULE": "orquestador.settings_test",
        "TEST_SETTINGS_ROLE": "runtime",
        faultpoints.POINT_ENV: faultpoints.CHECKPOINT_STARTED,
        faultpoints.ACTION_ENV: "target",
        faultpoints.SIGNAL_ENV: "SIGSTOP",
    }
    paused = WorkerProcess(paused_env, tmp_path / "paused.log", **WORKER)
    try:
        paused.wait_for_event("worker started", timeout=DEADLINE)
        accepted = enqueue(runtime_conn, flow_id, data={"n": 1})
        assert paused.wait_for_event("fault point reached", timeout=DEADLINE)
        wait_until(lambda: _stopped(paused.pid), timeout=DEADLINE, what="the worker to pause")

        provider.plan(route, slow(HELD_SECONDS))  # the new holder's call, if it makes one
        with WorkerProcess(env, tmp_path / "next.log", **WORKER) as taker:
            taker.wait_for_event("execution taken over", timeout=DEADLINE)
            if ends is not None:  # the charge: uncertain, an operator's now; nothing sent
                wait_until(
                    lambda: execution_row(runtime_conn, accepted.execution_id)["status"] == ends,
                    timeout=DEADLINE,
                    what=f"the execution to be {ends}",
                )
                assert provider.calls(route) == 0
            else:  # the reservation: sent again by its new holder, which holds the one place
                provider.wait_for_calls(1, route, timeout=DEADLINE)

            paused.signal(signal.SIGCONT)
            woke = paused.wait_for_event("execution interrupted", timeout=DEADLINE)
            assert woke["step"] == "call target", woke

            # The woken holder sent nothing: one call at most (the new holder's), one at a time.
            assert provider.calls(route) == (0 if ends else 1), paused.output()
            assert provider.most_at_once(route) <= 1
            if ends is None:
                wait_until(
                    lambda: (
                        execution_row(runtime_conn, accepted.execution_id)["status"] == "SUCCEEDED"
                    ),
                    timeout=DEADLINE,
                    what="the new holder to finish",
                )
                assert provider.calls(route) == 1
    finally:
        if paused.process.poll() is None:
            paused.signal(signal.SIGCONT)  # a stopped child is killed as well, but not left stopped
        paused.close()
