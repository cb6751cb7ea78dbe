"""The process registry built from INTEGRATIONS_FILE, the start-up check and NO_OP."""

from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from actions import registry as registry_module
from actions.base import IntegrationConfigError, Outcome
from actions.checks import check_integrations_file
from actions.registry import (
    IntegrationUnavailable,
    build_registry,
    load_registry,
    resolve,
    use_registry,
)
from orquestador.workerconfig import WorkerConfig, WorkerConfigError

from .conftest import run

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "integrations.toml"


@pytest.fixture(autouse=True)
def _fresh_process_registry():
    # load_registry installs the process registry; give each test its own and restore it.
    with use_registry(registry_module.Registry()):
        yield


def test_build_registry__no_file__everything_unavailable(settings):
    settings.INTEGRATIONS_FILE = ""

    registry = build_registry()

    assert registry.keys() == []
    with pytest.raises(IntegrationUnavailable) as caught:
        registry.resolve("payments.charge", 1)
    assert caught.value.reason == "no contract or route configured"


def test_load_registry__example_file__resolves_every_route(settings, monkeypatch):
    monkeypatch.setenv("PAYMENTS_AUTH", "Bearer example")
    settings.INTEGRATIONS_FILE = str(EXAMPLE)

    registry = load_registry()

    assert registry.keys() == [
        "documents.verify@1",
        "payments.charge@1",
        "payments.refund@1",
        "stock.release@1",
        "stock.reserve@1",
    ]
    binding = resolve("payments.charge", 1)  # the installed process registry
    assert binding.adapter.name == "http.json"
    assert binding.effect == "NON_IDEMPOTENT_WRITE"
    with pytest.raises(IntegrationUnavailable):
        resolve("payments.charge", 2)  # versions are distinct capabilities


def test_load_registry__bad_file__error_names_the_key(settings, monkeypatch, tmp_path):
    monkeypatch.delenv("PAYMENTS_AUTH", raising=False)
    settings.INTEGRATIONS_FILE = str(EXAMPLE)

    with pytest.raises(IntegrationConfigError) as caught:
        load_registry()

    assert caught.value.key == 'routes."payments.charge@1".headers_from_env.Authorization'


def test_load_registry__timeout_checked_against_the_configured_lease(settings, tmp_path):
    path = tmp_path / "integrations.toml"
    path.write_text(
        '[contracts."p.x@1"]\neffect = "READ_ONLY"\ntimeout_seconds = 10\n'
        '[routes."p.x@1"]\nadapter = "http.json"\nurl = "http://127.0.0.1:9/x"\n'
    )
    settings.INTEGRATIONS_FILE = str(path)

    with pytest.raises(IntegrationConfigError) as caught:
        load_registry(WorkerConfig(lease_seconds=15, renew_seconds=5))

    assert "WORKER_LEASE_SECONDS=15" in caught.value.reason


def test_load_registry__a_bad_lease_setting_is_refused_not_replaced_by_a_default(settings):
    settings.INTEGRATIONS_FILE = ""
    settings.WORKER_ENV = {**settings.WORKER_ENV, "WORKER_LEASE_SECONDS": "soon"}

    with pytest.raises(WorkerConfigError, match="WORKER_LEASE_SECONDS"):
        load_registry()
    (error,) = check_integrations_file()
    assert (error.id, "WORKER_LEASE_SECONDS" in error.msg) == ("actions.E002", True)


def test_system_check__reports_the_key(settings, tmp_path):
    path = tmp_path / "integrations.toml"
    path.write_text('[contracts."p.x@1"]\neffect = "SOMETIMES"\n')
    settings.INTEGRATIONS_FILE = str(path)

    (error,) = check_integrations_file()
    assert error.id == "actions.E001"
    assert 'contracts."p.x@1".effect' in error.msg
    with pytest.raises(SystemCheckError, match=r"contracts\.\"p\.x@1\"\.effect"):
        call_command("check", tags=["integrations"])


def test_system_check__good_file__quiet(settings):
    settings.INTEGRATIONS_FILE = ""

    assert check_integrations_file() == []


def test_no_op__only_in_simulation_mode(settings):
    settings.SIMULATION_MODE = False
    with pytest.raises(IntegrationUnavailable) as caught:
        build_registry().resolve("NO_OP", 1)
    assert "SIMULATION_MODE" in caught.value.reason

    settings.SIMULATION_MODE = True
    binding = build_registry().resolve("NO_OP", 1)
    assert binding.effect == "READ_ONLY"
    assert run(binding.adapter.call(None, binding)).outcome is Outcome.SUCCEEDED
