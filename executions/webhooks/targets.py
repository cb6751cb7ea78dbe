"""Where a webhook may go: `https://` only, and never to a loopback, private or link-local
address (WEBHOOK_ALLOW_HTTP and WEBHOOK_ALLOW_PRIVATE_NETWORKS relax the two rules, for tests).

The address rule is enforced where it cannot be dodged: on the address a delivery's socket is
about to connect to (`guarded_socket`, the connector's socket factory), after every resolution,
so a name that resolves to a public address when the subscription is made and to 127.0.0.1 when
it is delivered (DNS rebinding) is still refused, and so is an IP literal. An IPv6 address that
carries IPv4 addresses (`carried_ipv4`) is judged by those. Creating a subscription checks the
same rules early (`url_refusal`) and stores the URL normalised (`url_normalised`).
"""

import concurrent.futures
import errno
import ipaddress
import re
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Whitespace, control characters (C0, DEL, C1) and invisible marks (zero-width, bidi, BOM), as
# escapes Python's re and ECMA-262 read alike: the API schema's pattern is the same rule.
_UNSENDABLE_CLASS = r"\x00-\x20\x7f-\xa0\u1680\u2000-\u200f\u2028-\u202f\u205f-\u2064\u3000\ufeff"
URL_TEXT_PATTERN = f"^[^{_UNSENDABLE_CLASS}]*\\Z"  # \Z: $ would let a final newline through
_UNSENDABLE = re.compile(f"[{_UNSENDABLE_CLASS}]")
RESOLVE_TIMEOUT_SECONDS = 2.0  # seconds the early check waits for a name to resolve
# getaddrinfo has no timeout of its own: it runs here, and the check stops waiting for it.
_resolvers = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="resolve")


class AddressRefused(OSError):
    """A delivery's socket was about to connect to an address the rules refuse."""

    def __init__(self, rule: str, address: str) -> None:
        super().__init__(errno.EACCES, f"address refused by the {rule} rule")
        self.rule = rule
        self.address = address


# IPv6 forms whose packets end at an IPv4 address they carry (RFC 4291 §2.5.5, RFC 2765,
# RFC 6052, RFC 8215; 6to4 RFC 3056 and Teredo RFC 4380 through ipaddress's own properties).
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # ::a.b.c.d, deprecated but still routed by some
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT's ::ffff:0:a.b.c.d
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known prefix: the last 32 bits
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # local use: the prefix length is unknown


def carried_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses packets to `ip` may be delivered to, [] when it carries none."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)  # (server, client): the client's bits arrive inverted, undone here
    if ip in _NAT64 or ip in _TRANSLATED or (ip in _COMPATIBLE and int(ip) > 1):  # not :: or ::1
        return [ipaddress.IPv4Address(ip.packed[12:])]
    if ip in _NAT64_LOCAL:
        # RFC 6052 §2.2 places the address after a /48, /56, /64 or /96 prefix, skipping bits
        # 64-71; which one this network's translator uses is unknown, so every reading counts.
        packed = ip.packed
        unskipped = packed[:8] + packed[9:]
        readings = [packed[12:]] + [unskipped[at : at + 4] for at in (6, 7, 8)]
        return [ipaddress.IPv4Address(reading) for reading in readings]
    return []


def address_rule(address: str) -> str | None:
    """The rule that refuses connecting to `address` ("loopback", "link-local" or "private"),
    or None when it is a public address. An IPv6 address carrying IPv4 addresses is refused by
    the rule one of those breaks (loopback named before link-local, before private)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "private"  # not an address at all: nothing to connect to safely
    if isinstance(ip, ipaddress.IPv6Address):
        carried = carried_ipv4(ip)
        if carried:
            broken = {_ip_rule(one) for one in carried}
            return next((rule for rule in _RULES if rule in broken), None)
    return _ip_rule(ip)


_RULES = ("loopback", "link-local", "private")


def _ip_rule(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
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


def url_text_problem(url: str) -> str | None:
    """Why `url` cannot be sent as it stands (whitespace or a control character, which URL
    parsers drop or choke on, so what was stored is not what is delivered), or None."""
    found = _UNSENDABLE.search(url)
    if found is None:
        return None
    return (
        "must not contain whitespace or control characters "
        f"(U+{ord(found.group()):04X} at {found.start()})"
    )


def url_refusal(
    url: str,
    *,
    allow_http: bool,
    allow_private_networks: bool,
    resolve: Callable[[str, int], list[str]] | None = None,
) -> tuple[str, str] | None:
    """Why `url` may not be a webhook target: (rule, detail), or None. A malformed URL is the
    "url" rule. A name that does not resolve now is let through: every delivery checks again."""
    problem = url_text_problem(url)
    if problem is not None:
        return "url", f"url: {problem}"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "url", "url: not a valid URL"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        return "url", "url: the port must be a number from 1 to 65535"
    # urlsplit gives the scheme and host in lower case: both are case-insensitive.
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


def url_normalised(url: str) -> str:
    """`url` (one `url_refusal` let through) as stored and delivered: scheme and host in lower
    case (RFC 3986 §6.2.2.1), the rest as sent."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


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
