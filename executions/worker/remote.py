"""`RemoteWorkerRuntime`: the runtime SPI over HTTP to this application's worker endpoint
(executions/worker/endpoint.py; docs/adr/0006-remote-worker-runtime.md). Delivers no webhooks.

Invariants: it calls only WORKER_REMOTE_URL, with WORKER_ENDPOINT_TOKEN, following no redirect and
reading nothing from the environment; the dispatcher renews the lease while the endpoint works,
`execute` reading for at most WORKER_ENDPOINT_RUN_SECONDS plus a renewal period; a holder told to
stop stops waiting at once (`ExecutionInterrupted`) and the endpoint is told; only a 409
superseded naming this very execution is `ExecutionSuperseded`, anything else not a result a
`RemoteWorkerError`; one aiohttp session on the worker's loop carries every call.
"""

import asyncio
import ipaddress
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from orquestador.bearer import token_problem
from orquestador.workerconfig import DEFAULT_RUNTIME, RUNTIMES, WorkerConfig, WorkerConfigError

from ..queue.leases import ExecutionInterrupted, ExecutionSuperseded
from .runtime import Reservation, Reservations
from .slots import Holding
from .wire import (
    INTERRUPTED,
    SUPERSEDED,
    ExecutionPackage,
    ExecutionResult,
    ResultInvalid,
    cancel_json,
    package_json,
    refusal_wire,
    result_read,
)
from .writeretry import Flag

logger = logging.getLogger("executions.worker")

CONNECT_TIMEOUT_SECONDS = 5.0  # seconds, at most: also capped at one renewal period
CANCEL_READ_TIMEOUT_SECONDS = 5.0  # seconds, at most: a cancel is best effort
STOP_CHECK_SECONDS = 0.1  # seconds between looks at the stop signal while the endpoint works


class RemoteWorkerError(Exception):
    """The worker endpoint did not give a result (transport failure, timeout, refusal, fault).

    Never a superseded refusal: the dispatcher leaves the execution for recovery by lease.
    """


# ------------------------------------------------------------------------------
# Configuration (validated once, at start)
# ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RemoteTarget:
    """Where the remote runtime sends packages, and the secret it presents there."""

    url: str  # the endpoint's base URL, ending in "/"
    token: str

    def __repr__(self) -> str:  # never print the token
        return f"RemoteTarget(url={self.url!r})"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def remote_url(text: str) -> str:
    """Validate WORKER_REMOTE_URL and return it as a base URL ending in '/'."""
    text = text.strip()
    if not text:
        raise WorkerConfigError(
            "WORKER_REMOTE_URL is required when WORKER_RUNTIME=remote: the base URL of a worker "
            "endpoint, e.g. https://worker.internal/internal/worker/"
        )
    try:
        parts = urlsplit(text)
        host = parts.hostname or ""
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise WorkerConfigError(f"WORKER_REMOTE_URL is not a valid URL: {text!r}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise WorkerConfigError(
            f"WORKER_REMOTE_URL must be an http:// or https:// URL with a host; got {text!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise WorkerConfigError(
            "WORKER_REMOTE_URL must not carry credentials; the worker sends WORKER_ENDPOINT_TOKEN"
        )
    if parts.query or parts.fragment:
        raise WorkerConfigError(f"WORKER_REMOTE_URL must have no query or fragment; got {text!r}")
    if parts.scheme == "http" and not _loopback(host):
        raise WorkerConfigError(
            "WORKER_REMOTE_URL must use https:// unless it names a loopback address: the "
            f"bearer token would cross the network in clear text; got {text!r}"
        )
    return text if text.endswith("/") else text + "/"


def remote_target(raw: Mapping[str, str], *, token: str) -> RemoteTarget | None:
    """Validate WORKER_RUNTIME (and, for remote, WORKER_REMOTE_URL and the token).

    None means the local runtime, the default.
    """
    choice = raw.get("WORKER_RUNTIME", DEFAULT_RUNTIME).strip().lower() or DEFAULT_RUNTIME
    if choice not in RUNTIMES:
        raise WorkerConfigError(f"WORKER_RUNTIME must be local or remote, got {choice!r}")
    if choice == DEFAULT_RUNTIME:
        return None
    url = remote_url(raw.get("WORKER_REMOTE_URL", ""))
    if not token:
        raise WorkerConfigError(
            "WORKER_ENDPOINT_TOKEN is required when WORKER_RUNTIME=remote: the worker endpoint "
            "admits only callers presenting it"
        )
    problem = token_problem("WORKER_ENDPOINT_TOKEN", token)
    if problem:
        raise WorkerConfigError(problem)
    return RemoteTarget(url=url, token=token)


# ------------------------------------------------------------------------------
# The runtime
# ------------------------------------------------------------------------------
class RemoteWorkerRuntime(Reservations):
    """Runs each package on a worker endpoint over HTTP; same protocol as the local runtime.

    The package's JSON form (wire.py) is made here, where it leaves the process, and nowhere on
    the way from the claim."""

    # The endpoint runs principal-less packages as the worker's system identity (it wraps a
    # LocalWorkerRuntime), which is why it admits only callers with WORKER_ENDPOINT_TOKEN.
    runs_as_system = True

    def __init__(self, *, target: RemoteTarget, config: WorkerConfig) -> None:
        super().__init__()
        self._target = target
        self._execute_url = target.url + "execute"
        self._cancel_url = target.url + "cancel"
        connect = min(CONNECT_TIMEOUT_SECONDS, config.renew_seconds)
        # The dispatcher renews the lease while the endpoint works, so a run is bounded by the
        # endpoint's own limit (it answers RUN_TIME_LIMIT at WORKER_ENDPOINT_RUN_SECONDS), not
        # by one lease; one renewal period more covers that answer's way back.
        self._execute_timeout = aiohttp.ClientTimeout(
            connect=connect, sock_read=config.endpoint_run_seconds + config.renew_seconds
        )
        self._cancel_timeout = aiohttp.ClientTimeout(
            connect=connect, sock_read=min(CANCEL_READ_TIMEOUT_SECONDS, config.renew_seconds)
        )
        self._session: aiohttp.ClientSession | None = None
        self._slots = config.concurrency  # calls in flight at most: one per slot

    async def open(self) -> "RemoteWorkerRuntime":
        return self

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> "RemoteWorkerRuntime":
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _client(self) -> aiohttp.ClientSession:
        """One session for every call (its connections kept alive), made on the loop."""
        if self._session is None or self._session.closed:
            # Only the configured URL and token: no proxy, .netrc or CA bundle from the
            # environment decides where the token goes, and no cookie is kept.
            self._session = aiohttp.ClientSession(
                headers={
                    "Authorization": f"Bearer {self._target.token}",
                    "Content-Type": "application/json",
                },
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                connector=aiohttp.TCPConnector(limit=self._slots),
            )
        return self._session

    async def _post(self, url: str, body: str, timeout: aiohttp.ClientTimeout) -> tuple[int, Any]:
        """POST `body`; the status and the JSON answer (None when it is not JSON)."""
        async with self._client().post(
            url, data=body.encode(), timeout=timeout, allow_redirects=False
        ) as response:
            raw = await response.read()
            try:
                return response.status, json.loads(raw)
            except ValueError:
                return response.status, None

    async def _post_unless_stopped(
        self, body: str, stop: Flag
    ) -> tuple[int, Any] | Exception | None:
        """POST a package and wait for the answer (status and body, or the exception the call
        raised), or until `stop` is set (the lease is lost, the execution cancelled, the worker
        shutting down): then None, and the call is cancelled (nothing it brings back is used)."""
        post = asyncio.ensure_future(self._post(self._execute_url, body, self._execute_timeout))
        while not post.done() and not stop.is_set():
            await asyncio.wait({post}, timeout=STOP_CHECK_SECONDS)
        if stop.is_set() or not post.done():  # told to stop: whatever comes back is abandoned
            post.cancel()
            return None
        try:
            return post.result()
        except Exception as exc:  # handed to the caller, which raises it as an error
            return exc

    async def execute(self, reservation: Reservation, package: ExecutionPackage) -> ExecutionResult:
        Reservations.check(reservation, package)
        dispatch = package.dispatch
        execution_id = dispatch.execution_id
        answer = await self._post_unless_stopped(
            package_json(package), reservation.holding.cancelled
        )
        if answer is None:
            # The holder was told to stop while the endpoint worked; its answer is abandoned.
            # The endpoint was told too (cancel), and its writes are fenced in any case.
            logger.info(
                "remote run abandoned: the holder was told to stop", extra=dispatch.log_extra
            )
            raise ExecutionInterrupted(execution_id, step="remote execute")
        if isinstance(answer, Exception):
            raise RemoteWorkerError(
                f"the worker endpoint could not be reached or did not answer in time "
                f"({type(answer).__name__})"
            ) from answer
        status, body = answer
        if status == 200:
            try:
                return result_read(body, dispatch=dispatch)
            except ResultInvalid as exc:
                raise RemoteWorkerError(f"the worker endpoint's answer: {exc}") from None
        if status == 409 and isinstance(body, dict):
            if body == refusal_wire(SUPERSEDED, execution_id):
                raise ExecutionSuperseded(
                    execution_id, step="remote execute", token=dispatch.fence.token
                )
            if body == refusal_wire(INTERRUPTED, execution_id):
                raise ExecutionInterrupted(execution_id, step="remote execute")
        code = body.get("code") if isinstance(body, dict) else None
        raise RemoteWorkerError(
            f"the worker endpoint answered {status}" + (f" {str(code)[:40]!r}" if code else "")
        )

    async def _cancel_elsewhere(self, holding: Holding, reason: str | None) -> dict[str, Any]:
        """Tell the endpoint too, best effort (its own holder stops; its writes are fenced)."""
        fence = holding.dispatch.fence
        body = cancel_json(fence.execution_id, fence.token, reason)
        try:
            status, _ = await self._post(self._cancel_url, body, self._cancel_timeout)
            reached = status == 200
        except (aiohttp.ClientError, TimeoutError):
            reached = False
        return {"endpoint_reached": reached}
