"""Where a webhook may go: `https://` only, and never to a loopback, private or link-local
address (WEBHOOK_ALLOW_HTTP and WEBHOOK_ALLOW_PRIVATE_NETWORKS relax the two rules, for tests).

The address rule is enforced where it cannot be dodged: on the address a delivery's socket is
about to connect to (`guarded_socket`, the connector's socket factory), after every resolution,
so a name that resolves to a public address when the subscription is made and to 127.0.0.1 when
it is delivered (DNS rebinding) is still refused, and so is an IP literal. Creating a
subscription checks the same rules early (`url_refusal`), to say so at once.
"""

import concurrent.futures
import errno
import ipaddress
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

RESOLVE_TIMEOUT_SECONDS = 2.0  # seconds the early check waits for a name to resolve
# getaddrinfo has no timeout of its own: it runs here, and the check stops waiting for it.
_resolvers = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="resolve")


class AddressRefused(OSError):
    """A delivery's socket was about to connect to an address the rules refuse."""

    def __init__(self, rule: str, address: str) -> None:
        super().__init__(errno.EACCES, f"address refused by the {rule} rule")
        self.rule = rule
        self.address = address


def address_rule(address: str) -> str | None:
    """The rule that refuses connecting to `address` ("loopback", "link-local" or "private"),
    or None when it is a public address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "private"  # not an address at all: nothing to connect to safely
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if not ip.is_global or ip.is_multicast:
        return "private"
    return None


def resolve_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to now (the system resolver); [] when it does not, or not
    within RESOLVE_TIMEOUT_SECONDS."""
    future = _resolvers.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        infos = future.result(timeout=RESOLVE_TIMEOUT_SECONDS)
    except (OSError, UnicodeError, concurrent.futures.TimeoutError):
        return []
    return [str(info[4][0]) for info in infos]


def url_refusal(
    url: str,
    *,
    allow_http: bool,
    allow_private_networks: bool,
    resolve: Callable[[str, int], list[str]] | None = None,
) -> tuple[str, str] | None:
    """Why `url` may not be a webhook target: (rule, detail), or None. A malformed URL is the
    "url" rule. A name that does not resolve now is let through: every delivery checks again."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "url", "url: not a valid URL"
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return "url", "url: must be an absolute https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "url", "url: must not carry credentials"
    if parts.fragment:
        return "url", "url: must not have a fragment"
    if parts.scheme == "http" and not allow_http:
        return "https", "url: must use https://"
    if allow_private_networks:
        return None
    host = parts.hostname
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    addresses = [str(literal)] if literal is not None else []
    if literal is None:
        addresses = (resolve or resolve_addresses)(host, port or 443)
    for address in addresses:
        rule = address_rule(address)
        if rule is not None:
            return rule, f"url: resolves to a {rule} address"
    return None


def guarded_socket(allow_private_networks: bool) -> Callable[[Any], socket.socket]:
    """The connector's socket factory: a socket for an address the rules allow, else
    AddressRefused before anything is sent."""

    def factory(addr_info: Any) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        if not allow_private_networks:
            rule = address_rule(str(sockaddr[0]))
            if rule is not None:
                raise AddressRefused(rule, str(sockaddr[0]))
        return socket.socket(family=family, type=type_, proto=proto)

    return factory
