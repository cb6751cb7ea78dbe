"""What the transport refuses: an unverified certificate, proxies from the environment, a header
that would split the request. Each is refused before a byte of the request reaches anyone."""

import datetime as dt
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from actions.base import Outcome
from orquestador import errors
from tests.support.providers import JsonProvider, Reply

from .conftest import binding, context

SECRET = "Bearer s3cr3t-token-value"


def call(b, ctx=None):
    return b.adapter.call(ctx or context(), b)


class SelfSignedTlsServer:
    """A TLS listener on 127.0.0.1 with a certificate nobody trusts; it records whether any
    handshake completed and how many bytes of a request arrived."""

    def __init__(self, directory: Path) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        now = dt.datetime.now(dt.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .sign(key, hashes.SHA256())
        )
        cert_file, key_file = directory / "cert.pem", directory / "key.pem"
        cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(cert_file, key_file)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.handshakes = 0
        self.request_bytes = 0
        self.attempts = threading.Semaphore(0)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    with self._context.wrap_socket(conn, server_side=True) as tls:
                        self.handshakes += 1
                        self.request_bytes += len(tls.recv(65536))
                except (OSError, ssl.SSLError):
                    pass
            self.attempts.release()

    def close(self) -> None:
        self._listener.close()
        self._thread.join(timeout=5)


@pytest.fixture
def tls_server(tmp_path) -> Iterator[SelfSignedTlsServer]:
    server = SelfSignedTlsServer(tmp_path)
    yield server
    server.close()


def test_tls__untrusted_certificate__refused_before_sending(tls_server):
    b = binding(url=f"https://127.0.0.1:{tls_server.port}/charges")  # a non-idempotent write

    result = call(b)

    # The provider cannot have acted, so even a non-idempotent write is safe to retry.
    assert result.outcome is Outcome.TRANSIENT
    assert result.error_detail == "TLS certificate refused; nothing was sent"
    assert tls_server.attempts.acquire(timeout=5)
    assert (tls_server.handshakes, tls_server.request_bytes) == (0, 0)


def test_proxy__environment_settings_ignored(provider, monkeypatch):
    with JsonProvider() as proxy:
        for variable in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.setenv(variable, proxy.url())
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)

        result = call(binding(url=provider.url("/charges")))

        assert result.outcome is Outcome.SUCCEEDED
        assert provider.calls("/charges") == 1
        assert proxy.calls() == 0


@pytest.mark.parametrize(
    "value", [f"{SECRET}\r\nX-Injected: 1", f" {SECRET}", f"{SECRET}\n", "Bearer ☃"]
)
def test_header__value_that_cannot_travel__refused_before_sending(provider, monkeypatch, value):
    b = binding(
        url=provider.url("/charges"),
        headers_from_env={"Authorization": "PAYMENTS_AUTH"},
        environ={"PAYMENTS_AUTH": SECRET},
    )
    monkeypatch.setenv("PAYMENTS_AUTH", value)  # changed after the catalog was loaded

    result = call(b)

    assert result.outcome is Outcome.PERMANENT
    assert result.error_code == errors.PERMANENT_FAILURE
    assert result.error_detail == "the request could not be built"
    assert "s3cr3t" not in repr(result)
    assert provider.calls() == 0


def test_cookies__a_providers_cookie_is_never_sent_back(provider):
    provider.plan(
        "/charges",
        Reply(kind="ok", headers=(("Set-Cookie", "session=from-the-provider; Path=/"),)),
    )
    b = binding(url=provider.url("/charges"), effect="IDEMPOTENT_WRITE")

    first, second = call(b, context(key="e:1")), call(b, context(key="e:2"))

    assert (first.outcome, second.outcome) == (Outcome.SUCCEEDED, Outcome.SUCCEEDED)
    seen = provider.requests("/charges")
    assert seen[0].client == seen[1].client  # the same pooled connection, the same thread
    assert "cookie" not in seen[1].headers
