"""docker/ proven without a Docker engine: every service of the compose file that runs the image
gets exactly its environment (the Dockerfile's ENV, then the service's `environment`), and with it
`manage.py check --deploy`, the web server's own configuration check (gunicorn loads the WSGI
application, and with it the URLs and their JWT key check) and runworker's configuration checks
must pass. A secret the settings would refuse, or a WORKER_* value out of range, fails here. The
proxy is the only service published, and nginx accepts its configuration (deploy/proxy -t)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orquestador.bodies import MAX_BODY_BYTES
from tests.conftest import ROOT, manage

pytestmark = pytest.mark.process

COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
# The deploy checks left on purpose: the trial serves plain HTTP on 127.0.0.1 (README, "Docker").
TLS_WARNINGS = {"security.W004", "security.W008", "security.W012", "security.W016"}
TLS_ON = {
    "SECURE_SSL_REDIRECT": "true",
    "SESSION_COOKIE_SECURE": "true",
    "CSRF_COOKIE_SECURE": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}
# What runworker validates before it touches the database, in the order it does.
WORKER_CHECK = """
import django
django.setup()
from django.conf import settings
from actions.registry import load_registry
from orquestador.workerconfig import worker_config
from executions.worker.metrics import metrics_address
from executions.worker.remote import remote_target
config = worker_config(settings.WORKER_ENV)
metrics_address(settings.WORKER_ENV)
remote_target(settings.WORKER_ENV, token=settings.WORKER_ENDPOINT_TOKEN)
load_registry()
print("worker configuration ok:", config.concurrency, "slots")
"""


def image_env() -> dict[str, str]:
    """The ENV instructions of the Dockerfile (`ENV A=1 B=2`, possibly continued lines)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["ENV"]:
            env.update(word.split("=", 1) for word in words[1:])
    return env


def services() -> dict[str, dict]:
    """The compose services that run the image, with the role each runs."""
    compose = yaml.safe_load(COMPOSE.read_text())
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("build", {}).get("dockerfile") == "docker/Dockerfile"
    }


def service_env(service: dict, **overrides: str) -> dict[str, str]:
    """Exactly what the container gets, plus what this machine needs to run Python."""
    env = {**image_env(), **{k: str(v) for k, v in service.get("environment", {}).items()}}
    return {
        **env,
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "HOME": "/nonexistent",
        **overrides,
    }


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def deploy_check(env: dict[str, str]) -> subprocess.CompletedProcess:
    return run(manage("check", "--deploy", "--fail-level", "WARNING"), env)


def warning_ids(result: subprocess.CompletedProcess) -> set[str]:
    return {
        word.strip("()")
        for line in (result.stdout + result.stderr).splitlines()
        for word in line.split()
        if word.startswith("(") and word.endswith(")") and "." in word
    }


def web_check(env: dict[str, str]) -> subprocess.CompletedProcess:
    gunicorn = str(Path(sys.executable).parent / "gunicorn")
    return run(
        [
            gunicorn,
            "--check-config",
            "-c",
            "python:orquestador.gunicorn",
            "orquestador.wsgi:application",
        ],
        {**env, "WEB_BIND": "0.0.0.0:8000"},
    )


def test_compose__has_the_services_and_roles_the_readme_names():
    found = services()
    assert set(found) == {"migrate", "proxy", "web", "worker"}
    assert {name: s["command"] for name, s in found.items()} == {
        "migrate": ["migrate"],
        "proxy": ["proxy"],
        "web": ["web"],
        "worker": ["worker"],
    }
    assert "MIGRATION_DATABASE_URL" in found["migrate"]["environment"]
    assert "MIGRATION_DATABASE_URL" not in found["web"]["environment"]
    assert "MIGRATION_DATABASE_URL" not in found["worker"]["environment"]
    entrypoint = ENTRYPOINT.read_text()
    assert "gunicorn -c python:orquestador.gunicorn orquestador.wsgi:application" in entrypoint
    assert "manage.py runworker" in entrypoint
    assert 'ENTRYPOINT ["docker/entrypoint.sh"]' in DOCKERFILE.read_text()


def test_compose__only_the_proxy_is_published_and_nginx_takes_its_configuration(tmp_path):
    """Clients reach gunicorn only through nginx, configured from the one template."""
    found = services()
    assert found["proxy"]["ports"] == ["127.0.0.1:8000:8000"]
    assert [name for name, s in found.items() if s.get("ports")] == ["proxy"]
    entrypoint = ENTRYPOINT.read_text()
    assert (
        'deploy/proxy "${PROXY_LISTEN:-0.0.0.0:8000}" "${PROXY_UPSTREAM:-web:8000}"' in entrypoint
    )
    assert re.search(r"apt-get install [^\n]*\bnginx\b", DOCKERFILE.read_text())
    template = (ROOT / "deploy" / "nginx.conf").read_text()
    assert f"client_max_body_size {MAX_BODY_BYTES};" in template
    assert f"the body is larger than {MAX_BODY_BYTES} bytes" in template
    # The compose service's upstream (web:8000) resolves only inside Docker; the same template.
    result = run(
        [str(ROOT / "deploy" / "proxy"), "127.0.0.1:8000", "127.0.0.1:8001", str(tmp_path), "-t"],
        {"PATH": "/usr/sbin:/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


@pytest.mark.parametrize("name", ["migrate", "web", "worker"])
def test_compose__deploy_check_leaves_only_the_plain_http_warnings(name):
    result = deploy_check(service_env(services()[name]))
    assert warning_ids(result) == TLS_WARNINGS, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_compose__deploy_check_is_clean_with_the_tls_settings_on():
    result = deploy_check(service_env(services()["web"], **TLS_ON))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_compose__web_server_loads_the_application():
    result = web_check(service_env(services()["web"]))
    assert result.returncode == 0, result.stderr


def test_compose__worker_configuration_is_valid():
    result = run([sys.executable, "-c", WORKER_CHECK], service_env(services()["worker"]))
    assert result.returncode == 0, result.stderr
    assert "worker configuration ok: 10 slots" in result.stdout


# The same checks catch what the compose file once had: they are not vacuous.
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"JWT_SECRET": "change-me-local-only-jwt"}, "JWT_SECRET must be at least 32 bytes"),
        ({"ALLOWED_HOSTS": "*"}, "ALLOWED_HOSTS must name the host names"),
        ({"WORKER_ENDPOINT_TOKEN": "short"}, "WORKER_ENDPOINT_TOKEN must be at least 32"),
    ],
)
def test_checks__refuse_a_secret_the_settings_would_refuse(overrides, message):
    env = service_env(services()["web"], **overrides)
    for result in (deploy_check(env), web_check(env)):
        assert result.returncode != 0
        assert message in result.stderr


def test_checks__a_weak_secret_key_is_a_deploy_warning():
    result = deploy_check(service_env(services()["web"], SECRET_KEY="change-me-local-only"))
    assert "security.W009" in warning_ids(result)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"WORKER_RENEW_SECONDS": "40"}, "WORKER_RENEW_SECONDS"),
        ({"WORKER_CONCURRENCY": "0"}, "WORKER_CONCURRENCY"),
        ({"WORKER_POLL_MS": "fast"}, "WORKER_POLL_MS"),
        ({"WORKER_METRICS_PORT": "70000"}, "WORKER_METRICS_PORT"),
    ],
)
def test_checks__refuse_a_worker_value_out_of_range(overrides, message):
    result = run(
        [sys.executable, "-c", WORKER_CHECK], service_env(services()["worker"], **overrides)
    )
    assert result.returncode != 0
    assert message in result.stderr
