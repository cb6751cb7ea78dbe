"""DATABASE_POOLER and WORKER_LISTEN_DATABASE_URL: what works, and refusals that name the cause."""

import re

import pytest

from executions.worker.pooling import pooling_config
from orquestador.workerconfig import WorkerConfigError, database_pooler

POOLED = "postgres://app:pw@127.0.0.1:6432/orquestador"
DIRECT = "postgres://app:pw@127.0.0.1:5432/orquestador"


def test_no_pooler__changes_nothing():
    config = pooling_config({}, database_url=DIRECT)

    assert (config.pooler, config.listen_url) == ("", "")
    assert not config.transaction_pooled
    assert config.listens


def test_transaction_pooler_without_listen_url__polls():
    config = pooling_config({"DATABASE_POOLER": "transaction"}, database_url=POOLED)

    assert config.transaction_pooled
    assert not config.listens


def test_transaction_pooler_with_a_direct_listen_url__listens_there():
    config = pooling_config(
        {"DATABASE_POOLER": " Transaction ", "WORKER_LISTEN_DATABASE_URL": DIRECT},
        database_url=POOLED,
    )

    assert (config.pooler, config.listen_url) == ("transaction", DIRECT)
    assert config.listens


@pytest.mark.parametrize("raw", ["session", "statement", "pgbouncer", "yes"])
def test_unknown_pooler_mode__is_refused(raw):
    with pytest.raises(WorkerConfigError, match=r"DATABASE_POOLER must be empty .* got"):
        database_pooler(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"WORKER_LISTEN_DATABASE_URL": DIRECT},
            "WORKER_LISTEN_DATABASE_URL is set but DATABASE_POOLER is not 'transaction'",
        ),
        (
            {
                "DATABASE_POOLER": "transaction",
                "WORKER_LISTEN_DATABASE_URL": "postgres://app:pw@127.0.0.1:5432/other",
            },
            "names database 'other' but DATABASE_URL names 'orquestador'",
        ),
        (
            {"DATABASE_POOLER": "transaction", "WORKER_LISTEN_DATABASE_URL": POOLED},
            "same host and port as DATABASE_URL",
        ),
        (
            {"DATABASE_POOLER": "transaction", "WORKER_LISTEN_DATABASE_URL": "host=a port=x y"},
            "WORKER_LISTEN_DATABASE_URL is not a valid PostgreSQL URL",
        ),
        (
            {
                "DATABASE_POOLER": "transaction",
                "WORKER_LISTEN_DATABASE_URL": "postgres://postgres:pw@127.0.0.1:5432/orquestador",
            },
            "connects as 'postgres' but DATABASE_URL as 'app'",
        ),
        (
            {
                "DATABASE_POOLER": "transaction",
                "WORKER_LISTEN_DATABASE_URL": "postgres://127.0.0.1:5432/orquestador",
            },
            "connects as libpq's default user but DATABASE_URL as 'app'",
        ),
    ],
)
def test_combinations_that_cannot_work__are_refused_naming_them(raw, message):
    with pytest.raises(WorkerConfigError, match=re.escape(message)):
        pooling_config(raw, database_url=POOLED)
