"""Pooled HTTP connections: one urllib3 `PoolManager` per thread, closed when the thread ends.

A pool manager keeps no retries, follows no redirects, keeps no cookie and takes nothing from the
environment (certificates are checked against certifi's bundle); its connections hand their
socket to the call's watchdog once the request is written (watchdog.py) and send a request's
header block and body in one system call.
"""

import contextlib
import threading
import weakref
from typing import Any

import certifi
import urllib3
import urllib3.connection

from .watchdog import watch_current

POOL_SIZE = 4  # hosts, and connections per host, kept by each thread's pool manager

_local = threading.local()
_finalizers: set[weakref.finalize] = set()  # one per live pool manager, to close them all
_finalizers_lock = threading.Lock()


class _Holder:
    """Kept in thread-local storage; freed when its thread ends, which closes its pools."""

    __slots__ = ("__weakref__", "manager")

    def __init__(self, manager: urllib3.PoolManager) -> None:
        self.manager = manager


class _OneSend:
    """Hands a request's header block and its bytes body to the socket in one send, as
    http.client does for a bytes body and urllib3 does not: one segment and one system call per
    request instead of two (about a tenth of the transport's CPU per loopback call)."""

    _holding = False
    _held: bytes | None = None

    def request(
        self, method: str, url: str, body: Any = None, headers: Any = None, **kw: Any
    ) -> None:
        self._holding = isinstance(body, bytes) and bool(body) and not kw.get("chunked")
        try:
            super().request(method, url, body, headers, **kw)  # type: ignore[misc]
        finally:
            self._holding, self._held = False, None

    def send(self, data: Any) -> None:
        if self._holding:
            if self._held is None:  # the header block (endheaders): the body comes next
                self._held = data
                return
            data, self._held, self._holding = self._held + data, None, False
        super().send(data)  # type: ignore[misc]


# The request has been written when a connection starts reading the response; from then on the
# socket belongs to this call's watchdog, for the status line, the headers and the body.
class _WatchedHTTPConnection(_OneSend, urllib3.connection.HTTPConnection):
    # urllib3's own connections answer with its response type, not http.client's.
    def getresponse(self) -> urllib3.HTTPResponse:  # type: ignore[override]
        watch_current(self.sock)
        return super().getresponse()


class _WatchedHTTPSConnection(_OneSend, urllib3.connection.HTTPSConnection):
    # urllib3's own connections answer with its response type, not http.client's.
    def getresponse(self) -> urllib3.HTTPResponse:  # type: ignore[override]
        watch_current(self.sock)
        return super().getresponse()


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


def pool_manager() -> urllib3.PoolManager:
    """This thread's pool manager, created on first use."""
    holder = getattr(_local, "holder", None)
    if holder is None:
        manager = urllib3.PoolManager(
            num_pools=POOL_SIZE,
            maxsize=POOL_SIZE,
            retries=False,
            cert_reqs="CERT_REQUIRED",
            ca_certs=certifi.where(),
        )
        manager.pool_classes_by_scheme = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}
        holder = _Holder(manager)
        with _finalizers_lock:
            _finalizers.difference_update([f for f in _finalizers if not f.alive])
            _finalizers.add(weakref.finalize(holder, manager.clear))
        _local.holder = holder
    return holder.manager


def close_all_pools() -> None:
    """Close every thread's pooled connections (tests, shutdown). Pool managers stay usable."""
    with _finalizers_lock:
        finalizers = list(_finalizers)
        _finalizers.clear()
    for finalizer in finalizers:
        finalizer()
    with contextlib.suppress(AttributeError):
        del _local.holder
