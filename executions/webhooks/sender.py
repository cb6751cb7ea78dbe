"""One webhook attempt over HTTP: a POST on its own aiohttp session, guarded as
executions/webhooks/targets.py says, answered within WEBHOOK_TIMEOUT_SECONDS.

The session is the delivery loop's own, apart from the adapters' (actions/pools.py), because it
carries the address guard in its connector: no redirect followed, no cookie, nothing from the
environment (no proxy: the guard must see the receiver's own address), no DNS cache (each new
connection resolves and is checked again), receivers' names resolved on threads of its own
(actions/resolver.py). Whatever goes wrong becomes an `Attempt` with a short, safe error; a
receiver's answer is kept up to MAX_BODY_KEPT characters.
"""

import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
import certifi

from actions.resolver import ResolverThreads, ThreadsResolver

from .config import CONCURRENCY
from .models import MAX_BODY_KEPT
from .targets import AddressRefused, guarded_socket

USER_AGENT = "orquestador-webhooks"
KEEPALIVE_SECONDS = 15.0  # seconds an idle connection to a receiver is kept

# Receivers' names, apart from the adapters' providers' (actions/resolver.py says why): at most
# one resolution per attempt in flight of the process's delivery loop.
_RESOLVER_THREADS = ResolverThreads(CONCURRENCY, "webhook-resolver")


@dataclass(frozen=True)
class Attempt:
    delivered: bool
    code: int | None = None  # the receiver's status, when it answered
    error: str | None = None
    body: str | None = None  # the start of its answer


def _refusal(exc: BaseException) -> AddressRefused | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AddressRefused):
            return seen
        inner = getattr(seen, "os_error", None)
        if isinstance(inner, AddressRefused):
            return inner
        seen = seen.__cause__ or seen.__context__
    return None


class WebhookSender:
    """Sends attempts; opened lazily on the running loop, closed with `close`."""

    def __init__(
        self,
        *,
        timeout_seconds: float,
        allow_http: bool,
        allow_private_networks: bool,
        resolver: aiohttp.abc.AbstractResolver | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.allow_http = allow_http
        self.allow_private_networks = allow_private_networks
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                ssl=ssl.create_default_context(cafile=certifi.where()),
                limit=0,  # bounded by the loop's CONCURRENCY
                keepalive_timeout=KEEPALIVE_SECONDS,
                use_dns_cache=False,
                resolver=self._resolver or ThreadsResolver(_RESOLVER_THREADS),
                socket_factory=guarded_socket(self.allow_private_networks),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,
                timeout=aiohttp.ClientTimeout(total=self.timeout_seconds),
                skip_auto_headers=("Accept", "Accept-Encoding"),
            )
        return self._session

    async def send(self, *, url: str, body: bytes, headers: dict[str, str]) -> Attempt:
        """POST `body` to `url`; any 2xx is delivered."""
        # The scheme is case-insensitive (RFC 3986 §3.1): "HTTPS://" is https too. Read without
        # a parser, which could raise on a malformed row; the request below says "invalid URL".
        scheme = url.partition(":")[0].lower()
        if scheme != "https" and not (self.allow_http and scheme == "http"):
            return Attempt(False, error="refused by the https rule")
        session = self._open()
        try:
            # Bounded by the session's total timeout, from the connection to the answer's end
            # (one timer: a second one around it cost about 5 % of an attempt's CPU).
            async with session.post(
                url,
                data=body,
                headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
                allow_redirects=False,
            ) as response:
                answer = await response.content.read(MAX_BODY_KEPT * 4)
                status = response.status
        except TimeoutError:
            return Attempt(False, error=f"no answer within {self.timeout_seconds:g} s")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            refused = _refusal(exc)
            if refused is not None:
                return Attempt(False, error=f"refused by the {refused.rule} rule")
            return Attempt(False, error=_safe_error(exc))
        # Kept as text, without NUL (which PostgreSQL's text and jsonb refuse).
        text = answer.decode("utf-8", "replace")[:MAX_BODY_KEPT].replace("\x00", "\ufffd")
        if 200 <= status < 300:
            return Attempt(True, code=status, body=text)
        error = "redirect not followed" if 300 <= status < 400 else f"answered {status}"
        return Attempt(False, code=status, error=error, body=text)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _safe_error(exc: Any) -> str:
    """A short reason that holds nothing the receiver chose (no body, no header)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "TLS certificate refused"
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return "TLS handshake failed"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "could not connect"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "connection closed before an answer"
    if isinstance(exc, aiohttp.InvalidURL | ValueError):
        return "invalid URL"
    return "the request failed"
