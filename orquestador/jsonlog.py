"""One JSON object per log line, with the execution context the worker attaches, and the
`trace_id` and `span_id` of the current span when tracing is on (orquestador/tracing.py).

Formatting is on the worker's hot path at the default level (a few lines per execution), so the
encoder is built once and the timestamp's seconds are formatted once per second; in the worker
(`lean_records`) each record is also made lean: nothing gathered that no line carries, and the
formatter finds the event's context without walking every standard attribute."""

import functools
import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from . import tracing

# Attributes every LogRecord has; anything else passed through `extra=` is event context.
_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}
# What json.dumps(line, default=str, separators=(",", ":")) does, without its Python layers:
# the C encoder made for each line as JSONEncoder.encode makes it (with its own markers, so a
# circular value fails as it did), minus encode's and iterencode's frames.
_c_encoder = json.encoder.c_make_encoder  # type: ignore[attr-defined]
_encode_text = json.encoder.encode_basestring_ascii
_encode_slow = json.JSONEncoder(default=str, separators=(",", ":")).encode


def _encode(line: dict[str, Any]) -> str:
    if _c_encoder is None:  # an interpreter without the C accelerator
        return _encode_slow(line)
    return "".join(_c_encoder({}, str, _encode_text, None, ":", ",", False, False, True)(line, 0))


# The extras of lean records by the names they come with (a log call site passes the same names
# each time): which of them are event context. Bounded; cleared whole when full.
_EXTRAS_CACHE_SIZE = 1024
_extras_kept: dict[tuple[str, ...], tuple[str, ...]] = {}


def _kept(names: tuple[str, ...]) -> tuple[str, ...]:
    kept = _extras_kept.get(names)
    if kept is None:
        kept = tuple(n for n in names if n not in _STANDARD and not n.startswith("_"))
        if len(_extras_kept) >= _EXTRAS_CACHE_SIZE:
            _extras_kept.clear()
        _extras_kept[names] = kept
    return kept


class JsonFormatter(logging.Formatter):
    # A builtin, so never bound to the instance; mypy takes it for a method without arguments.
    converter = time.gmtime  # type: ignore[assignment]
    # (whole second, its text): replaced whole, so a thread never reads half of it.
    _second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": f"{self._seconds(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
            **tracing.log_fields(),  # the record's own trace_id (its execution's) comes after
        }
        attributes = record.__dict__
        if type(record) is _LeanRecord:
            # Its standard attributes come first, in a known number: what follows them is the
            # `extra=` fields (and `message`, `asctime` if another formatter set them).
            if len(attributes) > _LEAN_SIZE:
                tail = dict(list(attributes.items())[_LEAN_SIZE:])
                names = tuple(tail)
                kept = _kept(names)
                if kept == names:
                    line.update(tail)
                else:
                    line.update((name, tail[name]) for name in kept)
        else:
            for key, value in attributes.items():
                if key not in _STANDARD and not key.startswith("_"):
                    line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encode(line)

    def _seconds(self, created: float) -> str:
        """`created` to the second, as UTC text; formatted once per second."""
        second = int(created)
        cached = self._second
        if cached[0] != second:
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            cached = self._second = (second, text)
        return cached[1]


@functools.lru_cache(maxsize=256)
def _file_parts(pathname: str) -> tuple[str, str]:
    """(filename, module) of a record's path, as LogRecord computes them."""
    try:
        filename = os.path.basename(pathname)
        return filename, os.path.splitext(filename)[0]
    except (TypeError, ValueError, AttributeError):
        return pathname, "Unknown module"


class _LeanRecord(logging.LogRecord):
    """A LogRecord as `logging.LogRecord` makes one with `lean_records`' switches off: the same
    attributes in the same order and with the same values, the file name and module looked up
    once per path, no thread, process or process name asked for (None, as the switches leave
    them). The lines do not change (tests/unit/test_jsonlog.py compares both kinds)."""

    def __init__(
        self,
        name: str,
        level: int,
        pathname: str,
        lineno: int,
        msg: object,
        args: Any,
        exc_info: Any,
        func: str | None = None,
        sinfo: str | None = None,
        **kwargs: object,
    ) -> None:
        ct = time.time()
        self.name = name
        self.msg = msg
        if args and len(args) == 1 and isinstance(args[0], Mapping) and args[0]:
            args = args[0]
        self.args = args
        self.levelname = logging.getLevelName(level)
        self.levelno = level
        self.pathname = pathname
        self.filename, self.module = _file_parts(pathname)
        self.exc_info = exc_info
        self.exc_text = None
        self.stack_info = sinfo
        self.lineno = lineno
        self.funcName = func  # type: ignore[assignment]  # None, as LogRecord leaves it
        self.created = ct
        self.msecs = int((ct - int(ct)) * 1000) + 0.0
        self.relativeCreated = (ct - logging._startTime) * 1000  # type: ignore[attr-defined]
        self.thread = None
        self.threadName = None
        self.processName = None
        self.process = None


_LEAN_SIZE = len(vars(_LeanRecord("", logging.INFO, "", 0, "", (), None)))


class LineHandler(logging.StreamHandler):
    """A StreamHandler that writes and flushes each line under the lock `handle` already holds:
    the same line and the same single write, without `flush` taking that lock once more."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            stream = self.stream
            stream.write(line + self.terminator)
            stream.flush()
        except RecursionError:  # as StreamHandler.emit
            raise
        except Exception:
            self.handleError(record)


def lean_records() -> None:
    """Stop every LogRecord gathering what no line of this formatter carries: the caller's file,
    line and function (a walk up the stack per record), the thread's and the process's names and
    ids. The logging HOWTO's "Optimization" names these switches; the lines do not change. The
    records are then made by `_LeanRecord`, which asks for none of it."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.setLogRecordFactory(_LeanRecord)
