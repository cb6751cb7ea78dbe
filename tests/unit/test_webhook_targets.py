"""Where a webhook may go: one address rule for IPv4 and every IPv6 form that carries an IPv4
address (mapped, compatible, translated, NAT64, 6to4, Teredo), the same at subscription and on the
socket about to connect; URLs taken as sent, with scheme and host stored in lower case."""

import socket

import pytest

from executions.webhooks.targets import (
    AddressRefused,
    address_rule,
    carried_ipv4,
    guarded_socket,
    url_normalised,
    url_refusal,
)

PUBLIC = ["93.184.216.34"]


def refusal(url: str) -> tuple[str, str] | None:
    return url_refusal(
        url, allow_http=False, allow_private_networks=False, resolve=lambda *_: PUBLIC
    )


# Each form carrying a loopback, private or link-local IPv4 address, and the rule it breaks.
CARRIED = [
    ("::127.0.0.1", "loopback"),  # IPv4-compatible
    ("::10.1.2.3", "private"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
    ("::ffff:169.254.169.254", "link-local"),
    ("::ffff:0:10.0.0.1", "private"),  # IPv4-translated (SIIT)
    ("64:ff9b::127.0.0.1", "loopback"),  # NAT64, the well-known prefix
    ("64:ff9b::a9fe:a9fe", "link-local"),  # 169.254.169.254, through an IPv6-only network's NAT64
    ("64:ff9b::10.0.0.1", "private"),
    ("64:ff9b:1::a9fe:a9fe", "link-local"),  # NAT64, local use, read as a /96
    ("64:ff9b:1:a9fe:a9:fe00::", "link-local"),  # the same address after a /48 prefix
    ("64:ff9b:1:a00:1:200:808:808", "private"),  # 8.8.8.8 as a /96, 10.0.1.2 after a /48
    ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ("2002:a9fe:a9fe::1", "link-local"),
    ("2002:c0a8:101::", "private"),  # 192.168.1.1
    # Teredo: server 65.54.227.120, client 192.0.2.45 (a documentation address) inverted.
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "private"),
    ("2001:0:4136:e378::80ff:fffe", "loopback"),  # client 127.0.0.1
    ("2001:0:7f00:1:8000:63bf:f7f7:f7f7", "loopback"),  # server 127.0.0.1, client 8.8.8.8
    ("2001:0:a00:1::f7f7:f7f7", "private"),  # server 10.0.0.1
]

# The same forms carrying public addresses: judged by those, they are public.
CARRYING_PUBLIC = [
    "::8.8.8.8",
    "::ffff:8.8.8.8",
    "64:ff9b::8.8.8.8",
    "64:ff9b:1:808:8:808:808:808",  # 8.8.8.8 whichever prefix length the translator uses
    "2002:808:808::1",
    "2001:0:4136:e378::f7f7:f7f7",  # server 65.54.227.120, client 8.8.8.8
]


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "loopback"),
        ("10.9.8.7", "private"),
        ("172.16.0.1", "private"),
        ("192.168.0.1", "private"),
        ("100.64.0.1", "private"),
        ("0.0.0.0", "private"),  # noqa: S104  (an address judged, not bound)
        ("169.254.169.254", "link-local"),
        ("::1", "loopback"),
        ("::", "private"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("fd00::1", "private"),
        ("not an address", "private"),
        *CARRIED,
    ],
)
def test_address_rule__refuses(address, rule):
    assert address_rule(address) == rule


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:4700:4700::1111", *CARRYING_PUBLIC])
def test_address_rule__lets_public_addresses_through(address):
    assert address_rule(address) is None


def test_carried_ipv4__each_form_names_what_it_carries():
    import ipaddress

    def carried(text: str) -> list[str]:
        return [str(ip) for ip in carried_ipv4(ipaddress.IPv6Address(text))]

    assert carried("::127.0.0.1") == ["127.0.0.1"]
    assert carried("64:ff9b::a9fe:a9fe") == ["169.254.169.254"]
    assert carried("2002:7f00:1::") == ["127.0.0.1"]
    assert carried("2001:0:4136:e378:8000:63bf:3fff:fdd2") == ["65.54.227.120", "192.0.2.45"]
    assert carried("64:ff9b:1:a9fe:a9:fe00::")[1] == "169.254.169.254"  # the /48 reading
    assert carried("2606:4700:4700::1111") == []
    assert carried("::1") == [] and carried("::") == []


@pytest.mark.parametrize(("address", "rule"), CARRIED)
def test_url_refusal__an_ipv6_literal_carrying_a_refused_address(address, rule):
    assert refusal(f"https://[{address}]/hook") == (rule, f"url: resolves to a {rule} address")


@pytest.mark.parametrize(("address", "rule"), CARRIED[:6])
def test_url_refusal__a_name_resolving_to_such_a_form(address, rule):
    refused = url_refusal(
        "https://hooks.example.com/in",
        allow_http=False,
        allow_private_networks=False,
        resolve=lambda *_: ["93.184.216.34", address],
    )
    assert refused == (rule, f"url: resolves to a {rule} address")


@pytest.mark.parametrize(("address", "rule"), CARRIED)
def test_guarded_socket__refuses_the_form_before_a_socket_exists(address, rule):
    factory = guarded_socket(allow_private_networks=False)
    with pytest.raises(AddressRefused) as refused:
        factory((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, 443, 0, 0)))
    assert refused.value.rule == rule and refused.value.address == address


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (" https://hooks.example.com/in", "U+0020 at 0"),
        ("https://hooks.example.com/in ", "U+0020 at 28"),
        ("https://hooks.example.com/in\r\nX-Injected: 1", "U+000D at 28"),
        ("https://hooks.example.com/\tin", "U+0009"),
        ("https://hooks.exa\u200bmple.com/in", "U+200B"),
        ("https://hooks.example.com/in\x7f", "U+007F"),
    ],
)
def test_url_refusal__whitespace_and_control_characters(url, fragment):
    rule, detail = refusal(url) or ("", "")
    assert rule == "url" and "whitespace or control characters" in detail and fragment in detail


@pytest.mark.parametrize(
    "url",
    ["https://hooks.example.com:0/in", "https://hooks.example.com:65536/in", "https://h.io:99999/"],
)
def test_url_refusal__a_port_out_of_range(url):
    assert refusal(url) == ("url", "url: the port must be a number from 1 to 65535")


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        ("HTTPS://HOOKS.EXAMPLE.COM/In?A=B", "https://hooks.example.com/In?A=B"),
        ("hTTps://Hooks.Example.com:8443/", "https://hooks.example.com:8443/"),
        ("https://hooks.example.com:/in", "https://hooks.example.com/in"),
        ("HTTPS://[2606:4700:4700::AbCd]/x", "https://[2606:4700:4700::abcd]/x"),
        ("https://hooks.example.com", "https://hooks.example.com"),
    ],
)
def test_url_normalised__scheme_and_host_in_lower_case_the_rest_as_sent(url, stored):
    assert refusal(url) is None
    assert url_normalised(url) == stored
    assert refusal(stored) is None and url_normalised(stored) == stored
