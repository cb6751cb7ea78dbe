"""The address rule held where a delivery connects, for every IPv6 form that carries a loopback
IPv4 address (a receiver listens on 127.0.0.1 and gets nothing), and the scheme read without
regard to case (RFC 3986 §3.1), so a URL the subscription accepted can be delivered."""

import asyncio
import socket

import aiohttp
import pytest

from executions.webhooks.sender import Attempt, WebhookSender
from tests.support.receiver import Receiver

LOOPBACK_FORMS = [
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::127.0.0.1",  # IPv4-compatible
    "::ffff:0:127.0.0.1",  # IPv4-translated
    "64:ff9b::127.0.0.1",  # NAT64
    "64:ff9b:1::127.0.0.1",  # local-use NAT64
    "2002:7f00:1::",  # 6to4
    "2001:0:4136:e378::80ff:fffe",  # Teredo, client 127.0.0.1
]


class Answers(aiohttp.abc.AbstractResolver):
    """A DNS that answers `address` for every name."""

    def __init__(self, address: str) -> None:
        self.address = address

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list:
        return [
            {
                "hostname": host,
                "host": self.address,
                "port": port,
                "family": socket.AF_INET6 if ":" in self.address else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        pass


def send(url: str, *, allow_http: bool = True, private: bool = False, answer: str = "") -> Attempt:
    sender = WebhookSender(
        timeout_seconds=2.0,
        allow_http=allow_http,
        allow_private_networks=private,
        resolver=Answers(answer) if answer else None,
    )

    async def attempt() -> Attempt:
        try:
            return await sender.send(url=url, body=b"{}", headers={})
        finally:
            await sender.close()

    return asyncio.run(attempt())


@pytest.mark.parametrize("form", LOOPBACK_FORMS)
def test_sender__a_name_answering_a_form_that_carries_loopback_is_refused_at_connect(form):
    with Receiver() as receiver:
        port = receiver.server.server_address[1]
        got = send(f"http://hooks.example.com:{port}/in", answer=form)
    assert (got.delivered, got.error) == (False, "refused by the loopback rule")
    assert receiver.received == []


@pytest.mark.parametrize("form", LOOPBACK_FORMS)
def test_sender__a_literal_form_that_carries_loopback_is_refused_at_connect(form):
    with Receiver() as receiver:
        port = receiver.server.server_address[1]
        got = send(f"http://[{form}]:{port}/in")
    assert (got.delivered, got.error) == (False, "refused by the loopback rule")
    assert receiver.received == []


def test_sender__the_mapped_form_reaches_the_receiver_when_private_networks_are_allowed():
    # The refusals above are the guard's: the same address, unguarded, is the receiver.
    with Receiver() as receiver:
        port = receiver.server.server_address[1]
        got = send(f"http://hooks.example.com:{port}/in", private=True, answer="::ffff:127.0.0.1")
    assert got.delivered, got
    assert [r.path for r in receiver.received] == ["/in"]


def test_sender__the_scheme_is_read_whatever_its_case():
    with Receiver() as receiver:
        port = receiver.server.server_address[1]
        got = send(f"HTTP://127.0.0.1:{port}/in", private=True)
        assert got.delivered, got
        # https in capitals passes the https rule: it fails only at the TLS handshake with a
        # receiver that speaks plain HTTP.
        tls = send(f"HTTPS://127.0.0.1:{port}/tls", allow_http=False, private=True)
        assert (tls.delivered, tls.error) == (False, "TLS handshake failed")
        # http in capitals is still refused by the https rule where http is not allowed.
        plain = send(f"HtTp://127.0.0.1:{port}/plain", allow_http=False, private=True)
        assert (plain.delivered, plain.error) == (False, "refused by the https rule")
    assert [r.path for r in receiver.received] == ["/in"]


def test_sender__a_malformed_url_is_a_failed_attempt_not_an_exception():
    got = send("http://[::1/in", private=True)
    assert (got.delivered, got.error) == (False, "invalid URL")
