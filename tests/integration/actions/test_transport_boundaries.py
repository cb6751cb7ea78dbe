"""What the transport refuses: an unverified certificate, proxies from the environment, a header
that would split the request. Each is refused before a byte of the request reaches anyone."""

import contextlib
import datetime as dt
import ipaddress
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

from actions import pools
from actions.base import Outcome
from orquestador import errors
from tests.support.providers import JsonProvider, Reply

from .conftest import binding, context, run

SECRET = "Bearer s3cr3t-token-value"


def call(b, ctx=None):
    return run(b.adapter.call(ctx or context(), b))


class SelfSignedTlsServer:
    """A TLS provider on 127.0.0.1 with a self-signed certificate for `host` (an IP address or a
    DNS name). It records completed handshakes and the request bytes that arrived, and answers a
    request with a JSON object."""

    ANSWER = b'{"id":"tls-1"}'

    def __init__(self, directory: Path, host: str = "127.0.0.1") -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        now = dt.datetime.now(dt.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        self.cert_file, key_file = directory / "cert.pem", directory / "key.pem"
        self.cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(self.cert_file, key_file)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.handshakes = 0
        self.received = b""
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
                        self._answer(tls)
                except (OSError, ssl.SSLError):
                    pass
            self.attempts.release()

    def _answer(self, tls: ssl.SSLSocket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = tls.recv(65536)
            if not chunk:
                self.received += data
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(body) < length:
            body += tls.recv(65536)
        self.received += head + b"\r\n\r\n" + body
        tls.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(self.ANSWER), self.ANSWER)
        )

    def close(self) -> None:
        with contextlib.suppress(OSError):  # shutdown, unlike close, wakes the blocked accept
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)
        assert not self._thread.is_alive()


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
    assert (tls_server.handshakes, tls_server.received) == (0, b"")


def test_tls__trusted_certificate__the_call_goes_through(tls_server, monkeypatch):
    # The bundle the transport verifies against, here holding the provider's own certificate.
    monkeypatch.setattr(pools.certifi, "where", lambda: str(tls_server.cert_file))
    b = binding(url=f"https://127.0.0.1:{tls_server.port}/charges")

    result = call(b, context({"amount": 12}, key="e-9:charge"))

    assert result.outcome is Outcome.SUCCEEDED
    assert result.output == {"id": "tls-1"}
    assert tls_server.received.startswith(b"POST /charges HTTP/1.1\r\n")
    assert b"\r\nIdempotency-Key: e-9:charge\r\n" in tls_server.received
    assert tls_server.received.endswith(b'\r\n\r\n{"amount":12}')


def test_tls__trusted_certificate_for_another_host__refused_before_sending(tmp_path, monkeypatch):
    server = SelfSignedTlsServer(tmp_path, host="provider.example")
    try:
        monkeypatch.setattr(pools.certifi, "where", lambda: str(server.cert_file))
        b = binding(url=f"https://127.0.0.1:{server.port}/charges")

        result = call(b)

        assert result.outcome is Outcome.TRANSIENT
        assert result.error_detail == "TLS certificate refused; nothing was sent"
        assert server.attempts.acquire(timeout=5)
        assert (server.handshakes, server.received) == (0, b"")
    finally:
        server.close()


def test_tls__handshake_that_fails__nothing_sent_so_even_a_write_is_transient():
    # A server that answers the TLS hello with plain HTTP: the handshake cannot complete, and
    # no byte of the request can have been written (it is written only after the handshake).
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        hellos: list[bytes] = []

        def answer_in_plain_text() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(5)
                hellos.append(conn.recv(65536))
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        server = threading.Thread(target=answer_in_plain_text, daemon=True)
        server.start()
        result = call(binding(url=f"https://127.0.0.1:{port}/charges"))  # non-idempotent
        server.join(timeout=5)

    assert result.outcome is Outcome.TRANSIENT
    assert result.error_detail == "TLS handshake failed; nothing was sent"
    assert hellos and hellos[0][:1] == b"\x16"  # what arrived was a TLS handshake record


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
    assert seen[0].client == seen[1].client  # the same pooled connection, the same loop
    assert "cookie" not in seen[1].headers
