"""A real OpenID Connect provider on loopback for the sign-in and API token tests:
django-oauth-toolkit (settings.py here) under gunicorn, its sqlite database and RSA keys in a
folder of the test's. `rotate()` makes a new signing key and keeps the old one published, as a
provider's scheduled rotation does, and reloads the provider's workers (SIGHUP), not the API.
"""

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

ROOT = Path(__file__).resolve().parents[3]
START_SECONDS = 60  # for the provider to answer its discovery document
POLL_SECONDS = 0.05


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _new_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


class IdentityProvider:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.base}/o"
        self.log_path = folder / "idp.log"
        self.process: subprocess.Popen | None = None
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE"))},
            "DJANGO_SETTINGS_MODULE": "tests.support.idp.settings",
            "PYTHONPATH": str(ROOT),
            "IDP_DIR": str(folder),
            "IDP_ISSUER": self.issuer,
            "IDP_SECRET_KEY": secrets.token_urlsafe(48),
        }
        (folder / "active.pem").write_text(_new_key())

    # -- the process ----------------------------------------------------------------------------
    def start(self) -> "IdentityProvider":
        self._django("migrate", "--run-syncdb", "--verbosity", "0")
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                [
                    gunicorn,
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "--workers",
                    "1",
                    "--access-logfile",
                    "-",
                    # gunicorn's control socket is one path per user by default: not ours to take.
                    "--no-control-socket",
                    "tests.support.idp.wsgi:application",
                ],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.wait_for(lambda kids: bool(kids), what="the provider's discovery and keys")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # our own child, by its pid
            self.process.wait(timeout=30)
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    # -- its directory ---------------------------------------------------------------------------
    def control(self, *args: str) -> str:
        """Run control.py's command in the provider's settings (users, groups, clients); what it
        printed (a user's `sub`)."""
        return subprocess.run(
            [sys.executable, "-m", "tests.support.idp.control", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout.strip()

    def _django(self, *args: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "django", *args], cwd=ROOT, env=self.env, check=True, timeout=120
        )

    # -- its keys --------------------------------------------------------------------------------
    def kids(self) -> list[str]:
        """The `kid`s the provider publishes now (its JWKS)."""
        try:
            document = requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=5)
            document.raise_for_status()
            keys = requests.get(document.json()["jwks_uri"], timeout=5)
            keys.raise_for_status()
        except (requests.RequestException, ValueError):
            return []
        return [key["kid"] for key in keys.json()["keys"]]

    def rotate(self) -> list[str]:
        """A new active key; the old one stays published. Returns the JWKS's kids afterwards,
        once the reloaded workers publish the new key."""
        before = self.kids()
        inactive = len(list(self.folder.glob("inactive-*.pem")))
        active = self.folder / "active.pem"
        active.rename(self.folder / f"inactive-{inactive:03d}.pem")
        active.write_text(_new_key())
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)  # gunicorn: new workers, settings read again
        return self.wait_for(
            lambda kids: len(kids) == len(before) + 1 and set(before) <= set(kids),
            what="the rotated key in the JWKS",
        )

    def wait_for(self, condition, *, what: str) -> list[str]:
        deadline = time.monotonic() + START_SECONDS
        while True:
            assert self.process is not None and self.process.poll() is None, self.log()[-4000:]
            kids = self.kids()
            if condition(kids):
                return kids
            assert time.monotonic() < deadline, f"no {what} in time: {json.dumps(kids)}"
            time.sleep(POLL_SECONDS)  # polling a condition with a deadline

    def client_credentials(self, client_id: str, secret: str, scope: str) -> str:
        """An access token for an API client, from the provider's token endpoint."""
        document = requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=10)
        response = requests.post(
            document.json()["token_endpoint"],
            data={"grant_type": "client_credentials", "scope": scope},
            auth=(client_id, secret),
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return response.json()["access_token"]
