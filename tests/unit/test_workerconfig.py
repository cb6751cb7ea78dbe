"""WORKER_* validation: every rule names its variable, and nothing starts on a bad value."""

from pathlib import Path

import pytest

from orquestador.workerconfig import (
    ENV_DEFAULTS,
    WorkerConfig,
    WorkerConfigError,
    WorkerDisabled,
    worker_config,
    worker_tunables,
)

DEFAULTS = {
    "WORKER_ENABLED": "true",
    "WORKER_CONCURRENCY": "10",
    "WORKER_BATCH": "10",
    "WORKER_POLL_MS": "500",
    "WORKER_LEASE_SECONDS": "60",
    "WORKER_RENEW_SECONDS": "15",
    "WORKER_DRAIN_SECONDS": "20",
    "WORKER_RETRY_BASE_SECONDS": "1",
    "WORKER_RETRY_MAX_SECONDS": "300",
    "WORKER_RETRY_AFTER_MAX_SECONDS": "600",
    "WORKER_MAX_RECLAIMS": "5",
}


def test_worker_config__reads_the_documented_defaults():
    assert worker_config(DEFAULTS) == WorkerConfig()
    assert WorkerConfig().poll_seconds == 0.5


@pytest.mark.parametrize("name", [n for n in DEFAULTS if n != "WORKER_ENABLED"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_worker_config__refuses_non_positive_values_by_name(name, value):
    with pytest.raises(WorkerConfigError, match=f"^{name} must be positive"):
        worker_config({**DEFAULTS, name: value})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("WORKER_CONCURRENCY", "ten"),
        ("WORKER_BATCH", "2.5"),
        ("WORKER_LEASE_SECONDS", "a minute"),
        ("WORKER_DRAIN_SECONDS", "nan"),
        ("WORKER_ENABLED", "perhaps"),
        ("WORKER_MAX_RECLAIMS", "many"),
    ],
)
def test_worker_config__refuses_what_is_not_a_number_by_name(name, value):
    with pytest.raises(WorkerConfigError, match=f"^{name} must be"):
        worker_config({**DEFAULTS, name: value})


@pytest.mark.parametrize(("lease", "renew"), [("60", "30"), ("60", "45"), ("10", "5")])
def test_worker_config__renewal_must_be_strictly_under_half_the_lease(lease, renew):
    values = {**DEFAULTS, "WORKER_LEASE_SECONDS": lease, "WORKER_RENEW_SECONDS": renew}
    with pytest.raises(WorkerConfigError, match=r"^WORKER_RENEW_SECONDS must be strictly less"):
        worker_config(values)


def test_worker_config__accepts_a_renewal_just_under_half_and_fractions():
    config = worker_config({**DEFAULTS, "WORKER_LEASE_SECONDS": "2", "WORKER_RENEW_SECONDS": "0.5"})
    assert (config.lease_seconds, config.renew_seconds) == (2.0, 0.5)


def test_worker_config__retry_cap_not_below_its_base():
    with pytest.raises(WorkerConfigError, match=r"^WORKER_RETRY_MAX_SECONDS"):
        worker_config(
            {**DEFAULTS, "WORKER_RETRY_BASE_SECONDS": "10", "WORKER_RETRY_MAX_SECONDS": "5"}
        )


@pytest.mark.parametrize("value", ["false", "0", "", "FALSE"])
def test_worker_config__disabled_says_so(value):
    with pytest.raises(WorkerDisabled, match="WORKER_ENABLED is false"):
        worker_config({**DEFAULTS, "WORKER_ENABLED": value})


def test_env_defaults__are_the_ones_env_example_documents():
    """The defaults are written once (orquestador/workerconfig.py); .env.example must agree."""
    example = Path(__file__).resolve().parents[2] / ".env.example"
    documented = dict(
        line.split("=", 1)
        for line in example.read_text().splitlines()
        if line.startswith("WORKER_") and "=" in line
    )
    assert {k: documented[k] for k in ENV_DEFAULTS} == ENV_DEFAULTS
    assert worker_tunables(ENV_DEFAULTS) == WorkerConfig()


def test_worker_config__a_thousand_slots_at_most():
    assert worker_config({**DEFAULTS, "WORKER_CONCURRENCY": "1000"}).concurrency == 1000
    with pytest.raises(WorkerConfigError, match=r"^WORKER_CONCURRENCY must be at most 1,000"):
        worker_config({**DEFAULTS, "WORKER_CONCURRENCY": "1001"})


@pytest.mark.parametrize("value", ["queue", "tenant", " Tenant "])
def test_worker_fairness__takes_queue_or_tenant(value):
    assert worker_config({**DEFAULTS, "WORKER_FAIRNESS": value}).fairness == value.strip().lower()


def test_worker_fairness__defaults_to_the_queues_order():
    assert worker_config(DEFAULTS).fairness == "queue"


@pytest.mark.parametrize("value", ["round-robin", "tenants", "1"])
def test_worker_fairness__refuses_anything_else_by_name(value):
    with pytest.raises(WorkerConfigError, match=r"^WORKER_FAIRNESS must be queue .* or tenant"):
        worker_config({**DEFAULTS, "WORKER_FAIRNESS": value})
