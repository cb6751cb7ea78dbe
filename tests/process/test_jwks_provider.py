"""gunicorn as scripts/start runs it (processes of threads), verifying tokens with the keys of a
JWKS endpoint on 127.0.0.1: a flood of tokens with made-up kids reaches the endpoint at most once
a minute per process; a rotated key is taken up without a restart and a withdrawn one refused; the
keys held keep working while the endpoint is down, with one WARNING per process."""

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import requests

from orquestador import gunicorn as config
from tests.support import jwks as jwks_support
from tests.support import tokens
from tests.support.web import gunicorn_process
from tests.support.worker import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.process]

TIMEOUT = 10  # seconds per HTTP call
FLOOD_SECONDS = 5.0
CLIENTS = 8


@contextmanager
def web(process_env, log, server, **overrides: str) -> Iterator[str]:
    with gunicorn_process(
        process_env, log, JWT_SECRET="", JWT_JWKS_URL=server.url, **overrides
    ) as base:
        yield base


def status(base: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    return requests.get(f"{base}/api/v1/requests", headers=headers, timeout=TIMEOUT).status_code


def signed(signer: tokens.Signer, **claims) -> str:
    claims.setdefault("kid", signer.kid)
    return tokens.token(key=signer.key, algorithm=signer.algorithm, **claims)


def test_a_flood_of_unknown_kids__at_most_one_fetch_a_minute_per_process(process_env, tmp_path):
    signer = jwks_support.signer("RS256")
    attacker = jwks_support.signer("RS256", index=7)
    log = tmp_path / "web.log"
    with jwks_support.JwksServer() as server, web(process_env, log, server) as base:
        server.publish(signer)
        statuses: Counter[int] = Counter()
        lock = threading.Lock()
        deadline = time.monotonic() + FLOOD_SECONDS

        def flood() -> None:
            session, mine = requests.Session(), Counter()
            while time.monotonic() < deadline:
                token = signed(attacker, sub="mallory", kid=jwks_support.random_kid())
                headers = {"Authorization": f"Bearer {token}"}
                answer = session.get(f"{base}/api/v1/requests", headers=headers, timeout=TIMEOUT)
                mine[answer.status_code] += 1
            with lock:
                statuses.update(mine)

        clients = [threading.Thread(target=flood) for _ in range(CLIENTS)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        sent = sum(statuses.values())
        print(
            f"\n{sent} requests with random kids in {FLOOD_SECONDS:.0f} s from {CLIENTS} clients "
            f"to gunicorn ({config.workers} processes x {config.threads} threads): "
            f"{server.fetches} JWKS fetches"
        )
        assert statuses == Counter({401: sent}) and sent > 100
        # Each process fetches once, for its first token; none again within the minute.
        assert 1 <= server.fetches <= config.workers
        assert status(base, signed(signer)) == 200  # the real key, unharmed


def test_rotation_and_outage__no_restart(process_env, tmp_path):
    old, new = jwks_support.signer("RS256", kid="old"), jwks_support.signer("ES256", kid="new")
    log = tmp_path / "web.log"
    with (
        jwks_support.JwksServer() as server,
        web(process_env, log, server, JWT_JWKS_CACHE_SECONDS="2") as base,
    ):
        server.publish(old)
        old_token = signed(old)
        assert status(base, old_token) == 200

        # The provider publishes its next key, then signs with it: taken up at the next refresh.
        server.publish(new)
        new_token = signed(new, sub="bob")
        wait_until(lambda: status(base, new_token) == 200, timeout=30, what="the new key taken up")
        assert status(base, old_token) == 200  # still listed

        # The old key withdrawn: refused by every process once each has refreshed.
        server.withdraw("old")

        def old_refused_everywhere() -> bool:
            return all(status(base, signed(old, sub=f"u{n}")) == 401 for n in range(8))

        wait_until(old_refused_everywhere, timeout=30, what="the withdrawn key refused")
        assert status(base, old_token) == 401  # remembered once, verified again, refused
        assert status(base, new_token) == 200

        # The endpoint goes down: every process is due to refresh (2 s) and cannot; the key held
        # keeps verifying new tokens.
        server.stop()
        ends = time.monotonic() + 5.0
        calls = 0
        while time.monotonic() < ends:
            assert status(base, signed(new, sub=f"during-{calls}")) == 200
            calls += 1
        warnings = [line for line in log.read_text().splitlines() if "JWKS fetch from" in line]
        assert 1 <= len(warnings) <= config.workers, warnings
        assert all('"WARNING"' in line for line in warnings), warnings
