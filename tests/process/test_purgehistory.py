"""`manage.py purgehistory` as a real process on the runtime role, as a cron job runs it."""

import subprocess

import psycopg
import pytest

from tests.conftest import manage
from tests.integration.history.test_purge import OLD, finished
from tests.support.worker import action, checkpoint_rows, create_flow, flow_definition

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]


def _run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        manage("purgehistory", *args), env=env, capture_output=True, text=True, timeout=120
    )


def test_purgehistory__purges_as_the_runtime_role_and_reports(process_env, runtime_dsn):
    with psycopg.connect(runtime_dsn, autocommit=True) as conn:
        flow = create_flow(conn, flow_definition([action("a", "A"), action("b", "B")]))
        old = [finished(conn, flow, "SUCCEEDED", OLD) for _ in range(3)]
        kept = finished(conn, flow, "RECONCILIATION_REQUIRED", OLD)

        done = _run(process_env, "--older-than", "30", "--batch", "2", "--pause", "0")

        assert done.returncode == 0, done.stderr
        assert "purged 3 executions (6 checkpoints, 3 earlier attempts, 0 events)" in done.stdout
        assert "in 2 batches" in done.stdout
        assert all(checkpoint_rows(conn, eid) == {} for eid in old)
        assert set(checkpoint_rows(conn, kept)) == {"a", "b"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--older-than", "0"], "--older-than: must be a whole number of days, at least 1"),
        (["--older-than", "30", "--batch", "0"], "--batch: must be between 1 and 10000"),
        (["--older-than", "30", "--pause", "-1"], "--pause: must be between 0 and 60"),
        ([], "the following arguments are required: --older-than"),
    ],
)
def test_purgehistory__refuses_bad_arguments_naming_them(process_env, args, message):
    refused = _run(process_env, *args)

    assert refused.returncode != 0
    assert message in refused.stderr
