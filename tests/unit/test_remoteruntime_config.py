"""WORKER_RUNTIME, WORKER_REMOTE_URL and WORKER_ENDPOINT_TOKEN: validated at start, each rule
naming its variable; the remote runtime's timeouts stay below the lease."""

import pytest

from executions.worker.remote import RemoteTarget, RemoteWorkerRuntime, remote_target
from orquestador.workerconfig import (
    ENV_DEFAULTS,
    WorkerConfig,
    WorkerConfigError,
    worker_tunables,
)

TOKEN = "w" * 40


def test_remote_target__local_is_the_default():
    assert remote_target({}, token="") is None
    assert remote_target({"WORKER_RUNTIME": "local"}, token="") is None
    assert remote_target({"WORKER_RUNTIME": " "}, token="") is None


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:8000/internal/worker/", "http://127.0.0.1:8000/internal/worker/"),
        ("http://localhost:8000/internal/worker", "http://localhost:8000/internal/worker/"),
        ("http://[::1]:8000/internal/worker/", "http://[::1]:8000/internal/worker/"),
        ("https://worker.internal/internal/worker/", "https://worker.internal/internal/worker/"),
    ],
)
def test_remote_target__accepts_an_operator_url(url, base):
    target = remote_target({"WORKER_RUNTIME": "remote", "WORKER_REMOTE_URL": url}, token=TOKEN)
    assert target == RemoteTarget(url=base, token=TOKEN)
    assert TOKEN not in repr(target)


@pytest.mark.parametrize(
    ("raw", "token", "message"),
    [
        ({"WORKER_RUNTIME": "lambda"}, TOKEN, "WORKER_RUNTIME must be local or remote"),
        ({"WORKER_RUNTIME": "remote"}, TOKEN, "WORKER_REMOTE_URL is required"),
        (
            {"WORKER_RUNTIME": "remote", "WORKER_REMOTE_URL": "ftp://127.0.0.1/worker/"},
            TOKEN,
            "WORKER_REMOTE_URL must be an http:// or https:// URL",
        ),
        (
            {"WORKER_RUNTIME": "remote", "WORKER_REMOTE_URL": "http://10.0.0.7/internal/worker/"},
            TOKEN,
            "WORKER_REMOTE_URL must use https://",
        ),
        (
            {"WORKER_RUNTIME": "remote", "WORKER_REMOTE_URL": "https://u:p@worker.internal/"},
            TOKEN,
            "WORKER_REMOTE_URL must not carry credentials",
        ),
        (
            {"WORKER_RUNTIME": "remote", "WORKER_REMOTE_URL": "https://worker.internal/?to=x"},
            TOKEN,
            "WORKER_REMOTE_URL must have no query",
        ),
        (
            {"WORKER_RUNTIME": "remote", "WORKER_REMOTE_URL": "https://worker.internal:99999/"},
            TOKEN,
            "WORKER_REMOTE_URL is not a valid URL",
        ),
        (
            {"WORKER_RUNTIME": "remote", "WORKER_REMOTE_URL": "https://worker.internal/"},
            "",
            "WORKER_ENDPOINT_TOKEN is required",
        ),
        (
            {"WORKER_RUNTIME": "remote", "WORKER_REMOTE_URL": "https://worker.internal/"},
            "short",
            "WORKER_ENDPOINT_TOKEN must be at least 32 characters",
        ),
    ],
)
def test_remote_target__refuses_naming_the_variable(raw, token, message):
    with pytest.raises(WorkerConfigError, match=message):
        remote_target(raw, token=token)


def test_remote_runtime__waits_for_the_endpoints_own_limit_not_one_lease():
    config = WorkerConfig(lease_seconds=60, renew_seconds=15, endpoint_run_seconds=300)
    runtime = RemoteWorkerRuntime(
        target=RemoteTarget(url="https://worker.internal/", token=TOKEN), config=config
    )
    connect, read = runtime._execute_timeout.connect, runtime._execute_timeout.sock_read
    # The lease is renewed meanwhile; the endpoint answers RUN_TIME_LIMIT at its limit, and one
    # renewal period more covers that answer's way back.
    assert 0 < connect <= 5 and read == 300 + 15
    cancel = runtime._cancel_timeout
    assert cancel.connect + cancel.sock_read < config.lease_seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "WORKER_ENDPOINT_RUN_SECONDS must be positive"),
        ("-5", "WORKER_ENDPOINT_RUN_SECONDS must be positive"),
        ("3601", "WORKER_ENDPOINT_RUN_SECONDS must be at most 3600"),
        ("soon", "WORKER_ENDPOINT_RUN_SECONDS must be a positive number of seconds"),
        ("nan", "WORKER_ENDPOINT_RUN_SECONDS must be a finite number"),
    ],
)
def test_endpoint_run_seconds__is_validated_naming_the_variable(value, message):
    with pytest.raises(WorkerConfigError, match=message):
        worker_tunables({**ENV_DEFAULTS, "WORKER_ENDPOINT_RUN_SECONDS": value})


def test_endpoint_run_seconds__defaults_to_five_minutes():
    assert worker_tunables(ENV_DEFAULTS).endpoint_run_seconds == 300
