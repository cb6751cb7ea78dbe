"""The worker endpoint, mounted under /internal/worker/ only when WORKER_ENDPOINT_ENABLED is true
(docs/worker-protocol.md#runtime-spi, docs/adr/0006-remote-worker-runtime.md): `POST execute` runs
a package through a `LocalWorkerRuntime` here and answers its result, or `409 {"code":
"superseded" | "interrupted", "executionId"}`; `POST cancel` signals the holder, best effort.

Invariants: never without its token (settings and `endpoint_runtime` refuse), compared in constant
time before the body is read, so a package's `principal` is honoured only from that caller; a
malformed package is 400 INVALID_BODY, a fault of ours 500 without detail; a run past
WORKER_ENDPOINT_RUN_SECONDS is told to stop and answered 503 RUN_TIME_LIMIT; no transaction here.
"""

import concurrent.futures
import functools
import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from orquestador import errors
from orquestador.bearer import MIN_TOKEN_LENGTH, bearer_matches
from orquestador.workerconfig import worker_tunables

from ..models import Request
from .loopthread import LoopThread
from .runtime import LocalWorkerRuntime, dispatch_once
from .slots import Holding
from .wire import (
    Ending,
    ExecutionPackage,
    ExecutionResult,
    PackageInvalid,
    cancel_read,
    package_read,
    principal_tenant,
    refusal_wire,
    result_wire,
)

logger = logging.getLogger("executions.worker")

MAX_PACKAGE_BYTES = 64 * 1024  # bytes of a posted package or cancel, at most
WWW_AUTHENTICATE = 'Bearer realm="worker"'

Posted = TypeVar("Posted")  # what a view reads from its body: a package, or a cancel


# ------------------------------------------------------------------------------
# The runtime behind the endpoint
# ------------------------------------------------------------------------------
# The local runtime lives on an event loop of its own, in a thread of this web process: a view
# (synchronous, under gunicorn's threads) hands it a package and waits for the result. One
# long-lived loop rather than asyncio.run (or asgiref's async_to_sync) per request, because the
# runtime's connection pool belongs to one loop for its whole life.
_runtime: LocalWorkerRuntime | None = None
_loop: LoopThread | None = None
_runtime_lock = threading.Lock()


def endpoint_guard(*, runs_as_system: bool, token: str) -> None:
    """Refuse to serve a runtime that runs as the system identity without the token gate."""
    if runs_as_system and not token:
        raise ImproperlyConfigured(
            "The worker endpoint runs principal-less packages as the system identity and needs "
            f"WORKER_ENDPOINT_TOKEN (at least {MIN_TOKEN_LENGTH} characters) to authenticate its "
            "callers."
        )


def endpoint_runtime() -> tuple[LocalWorkerRuntime, LoopThread]:
    """The runtime this process runs posted packages with, opened on first use, and the loop it
    runs on."""
    global _runtime, _loop
    with _runtime_lock:
        if _runtime is None:
            from .database import database_conninfo

            # The endpoint process need not be a `runworker` (WORKER_ENABLED is about claiming),
            # but it runs executions with the same WORKER_* tunables, validated the same way.
            config = worker_tunables(settings.WORKER_ENV)
            runtime = LocalWorkerRuntime(
                conninfo=database_conninfo(
                    settings.DATABASES["default"], application_name="orquestador-worker-endpoint"
                ),
                config=config,
            )
            endpoint_guard(runs_as_system=runtime.runs_as_system, token=_token())
            loop = LoopThread(name="worker-endpoint-loop")
            _runtime, _loop = loop.call(runtime.open()), loop
        if _loop is None:  # a runtime set without its loop: endpoint_runtime_set refuses that
            raise ImproperlyConfigured("the worker endpoint's runtime has no event loop")
        return _runtime, _loop


def endpoint_runtime_set(
    runtime: LocalWorkerRuntime | None, loop: LoopThread | None = None
) -> LocalWorkerRuntime | None:
    """Serve with `runtime`, opened on `loop` (None: build one from settings on next use);
    return the previous."""
    global _runtime, _loop
    if runtime is not None:
        endpoint_guard(runs_as_system=runtime.runs_as_system, token=_token())
        if loop is None:
            raise ImproperlyConfigured("a worker endpoint runtime needs the loop it runs on")
    with _runtime_lock:
        previous, _runtime, _loop = _runtime, runtime, loop
    return previous


def _token() -> str:
    return settings.WORKER_ENDPOINT_TOKEN


# ------------------------------------------------------------------------------
# Reading what was posted
# ------------------------------------------------------------------------------
def _json_object(request: HttpRequest) -> dict[str, Any]:
    length = request.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > MAX_PACKAGE_BYTES:
        raise PackageInvalid(f"the body is larger than {MAX_PACKAGE_BYTES} bytes")
    try:
        raw = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):  # also integers past Python's 4,300 digits
        raise PackageInvalid("the body is not valid JSON") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise PackageInvalid("the body nests too deeply") from None
    if not isinstance(raw, dict):
        raise PackageInvalid("the body must be a JSON object")
    return raw


# ------------------------------------------------------------------------------
# Running one package within WORKER_ENDPOINT_RUN_SECONDS
# ------------------------------------------------------------------------------
class _PastLimit(Exception):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class _RunFailed(Exception):
    """The run raised; it was logged where it happened."""


def _run_within_limit(
    package: ExecutionPackage, runtime: LocalWorkerRuntime, loop: LoopThread, seconds: float
) -> ExecutionResult:
    """Run the package as a task on the runtime's loop and wait for it at most `seconds`; past
    that, tell it to stop and raise _PastLimit (the run ends on its own: its writes stay
    fenced)."""
    dispatch = package.dispatch
    holding = Holding(dispatch)  # this endpoint's hold on it: the stop signal a cancel sets
    ended: dict[str, Any] = {}

    async def run() -> None:
        try:
            ended["result"] = await dispatch_once(runtime, package, holding)
        except Exception:  # logged here, where it happened, whether or not anyone still waits
            logger.exception(
                "worker endpoint: execution run failed; left for recovery by lease",
                extra=dispatch.log_extra,
            )
            ended["failed"] = True

    done = loop.submit(run())
    try:
        done.result(seconds)
    except concurrent.futures.TimeoutError:
        holding.cancelled.set()
        logger.warning(
            "worker endpoint: run passed WORKER_ENDPOINT_RUN_SECONDS; told to stop, left for "
            "recovery by lease",
            extra={**dispatch.log_extra, "limit_seconds": seconds},
        )
        raise _PastLimit(seconds) from None
    if "result" not in ended:
        raise _RunFailed
    return ended["result"]


# ------------------------------------------------------------------------------
# Views
# ------------------------------------------------------------------------------
def _authenticated(request: HttpRequest) -> bool:
    # No token admits nobody: settings refuse that, and this holds if it happens anyway.
    return bearer_matches(request.headers.get("Authorization"), _token())


def _error(status: int, code: str, detail: str) -> JsonResponse:
    response = JsonResponse({"code": code, "detail": detail}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = WWW_AUTHENTICATE
    return response


def _posted(
    read: Callable[[dict[str, Any]], Posted],
) -> Callable[[Callable[[Posted], JsonResponse]], Callable[[HttpRequest], JsonResponse]]:
    """A view of what an authenticated caller posted, read by `read`; a call without the token
    is refused (401) before its body is read, a malformed body answered 400."""

    def view_of(view: Callable[[Posted], JsonResponse]) -> Callable[[HttpRequest], JsonResponse]:
        @csrf_exempt
        @require_POST
        @functools.wraps(view)
        def answer(request: HttpRequest) -> JsonResponse:
            if not _authenticated(request):
                return _error(
                    401,
                    errors.UNAUTHENTICATED,
                    "this endpoint needs 'Authorization: Bearer <token>'",
                )
            try:
                posted = read(_json_object(request))
            except PackageInvalid as exc:
                return _error(400, errors.INVALID_BODY, str(exc))
            return view(posted)

        return answer

    return view_of


@_posted(package_read)
def execute(package: ExecutionPackage) -> JsonResponse:
    dispatch = package.dispatch
    tenant = principal_tenant(dispatch.principal)
    # Honoured only from a caller that presented the token above, and only within its tenant.
    if (
        tenant is not None
        and Request.objects.filter(id=dispatch.fence.request_id).exclude(scope=tenant).exists()
    ):
        return _error(
            400,
            errors.INVALID_BODY,
            "principal.tenant: the package's principal is not of the request's tenant",
        )
    try:
        runtime, loop = endpoint_runtime()
        result = _run_within_limit(package, runtime, loop, runtime.config.endpoint_run_seconds)
    except _PastLimit as exc:
        return _error(
            503,
            errors.RUN_TIME_LIMIT,
            f"the run passed WORKER_ENDPOINT_RUN_SECONDS ({exc.seconds:g} s): it was told to "
            "stop and is left for recovery by lease",
        )
    except _RunFailed:
        return _error(500, errors.INTERNAL_ERROR, "internal error; it has been logged")
    except Exception:
        logger.exception(
            "worker endpoint: execution run could not start; left for recovery by lease",
            extra=dispatch.log_extra,
        )
        return _error(500, errors.INTERNAL_ERROR, "internal error; it has been logged")
    if result.status in (Ending.SUPERSEDED, Ending.INTERRUPTED):
        return JsonResponse(refusal_wire(result.status, package.execution_id), status=409)
    return JsonResponse(result_wire(result))


@_posted(cancel_read)
def cancel(posted: tuple[uuid.UUID, int | None, str | None]) -> JsonResponse:
    execution_id, token, reason = posted
    runtime, loop = endpoint_runtime()
    cancelled = loop.call(runtime.cancel(str(execution_id), reason, token=token))
    return JsonResponse({"cancelled": cancelled})
