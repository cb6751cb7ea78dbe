"""The sender's own HTTP/1.1 path against raw servers on 127.0.0.1: connections kept alive and
reused, answers read whole or cut (and then not reused), chunked answers, a receiver that
closes, and TLS verified."""

import asyncio
import datetime
import ssl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from executions.webhooks.models import MAX_BODY_KEPT
from executions.webhooks.sender import WebhookSender


class Server:
    """Answers each request with `answer` (bytes, or a function of the request's number)."""

    def __init__(self, answer, *, tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.tls = tls
        self.connections = 0
        self.requests: list[bytes] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answer
                writer.write(answer(len(self.requests)) if callable(answer) else answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}/hook?x=1"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


def _sender() -> WebhookSender:
    return WebhookSender(timeout_seconds=2.0, allow_http=True, allow_private_networks=True)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def test_sender__keeps_one_connection_alive_for_many_attempts():
    async def main():
        server, sender = Server(OK), _sender()
        async with server as url:
            got = [await sender.send(url=url, body=b"{}", headers={"X-A": "1"}) for _ in range(5)]
        await sender.close()
        return server, got

    server, got = asyncio.run(main())
    assert [(a.delivered, a.code, a.body) for a in got] == [(True, 200, "ok")] * 5
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /hook?x=1 HTTP/1.1\r\n") and b"\r\nX-A: 1\r\n" in first
    assert first.endswith(b"\r\n\r\n{}")


def test_sender__reads_a_chunked_answer_and_cuts_a_long_one_without_reusing_it():
    chunked = (
        b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nnot\r\n4\r\n now\r\n0\r\n\r\n"
    )
    long = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"a" * 100_000

    async def main():
        server, sender = Server(lambda n: chunked if n == 1 else long), _sender()
        async with server as url:
            got = [await sender.send(url=url, body=b"{}", headers={}) for _ in range(3)]
        await sender.close()
        return server, got

    server, got = asyncio.run(main())
    assert (got[0].delivered, got[0].code, got[0].body) == (False, 503, "not now")
    assert got[1].delivered and got[1].body == "a" * MAX_BODY_KEPT
    # The chunked answer was read whole (reused); the long one was cut (closed, not reused).
    assert server.connections == 2 and len(server.requests) == 3


def test_sender__a_receiver_that_closes_gets_a_new_connection():
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"

    async def main():
        server, sender = Server(closing), _sender()
        async with server as url:
            got = [await sender.send(url=url, body=b"{}", headers={}) for _ in range(3)]
        await sender.close()
        return server, got

    server, got = asyncio.run(main())
    assert all(a.delivered for a in got)
    assert server.connections == 3


def _self_signed(tmp_path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


def test_sender__a_certificate_no_authority_signed_is_refused(tmp_path):
    async def main():
        server, sender = Server(OK, tls=_self_signed(tmp_path)), _sender()
        async with server as url:
            got = await sender.send(url=url, body=b"{}", headers={})
        await sender.close()
        return server, got

    server, got = asyncio.run(main())
    assert (got.delivered, got.error) == (False, "TLS certificate refused")
    assert server.requests == []
