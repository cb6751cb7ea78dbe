"""One JSON object per log line (orquestador/jsonlog.py)."""

import json
import logging
import sys
import uuid

import pytest

from orquestador import jsonlog

EXECUTION = uuid.UUID("8d3f6a52-5a1e-4c3b-9a57-0f0c2b1d9e11")


def _record(message: str = "action started", *, created: float, **extra: object):
    record = logging.getLogger("executions.worker").makeRecord(
        "executions.worker", logging.INFO, __file__, 1, message, (), None, extra=extra
    )
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    return record


@pytest.fixture
def restored_logging():
    saved = (
        logging._srcfile,
        logging.logThreads,
        logging.logProcesses,
        logging.logMultiprocessing,
    )
    yield
    (
        logging._srcfile,
        logging.logThreads,
        logging.logProcesses,
        logging.logMultiprocessing,
    ) = saved


def test_format__one_object_fields_in_order_extras_after():
    formatter = jsonlog.JsonFormatter()
    record = _record(created=1_796_174_453.0789, execution_id=EXECUTION, attempt=2)

    line = formatter.format(record)

    assert line == (
        '{"ts":"2026-12-02T01:20:53.078Z","level":"INFO","logger":"executions.worker",'
        f'"event":"action started","execution_id":"{EXECUTION}","attempt":2}}'
    )


def test_format__timestamp_follows_each_second_and_millisecond():
    formatter = jsonlog.JsonFormatter()
    stamps = [
        json.loads(formatter.format(_record(created=at)))["ts"]
        for at in (1_796_174_453.999, 1_796_174_454.0, 1_796_174_454.5, 1_796_174_453.25)
    ]

    assert stamps == [
        "2026-12-02T01:20:53.999Z",
        "2026-12-02T01:20:54.000Z",
        "2026-12-02T01:20:54.500Z",
        "2026-12-02T01:20:53.250Z",
    ]


def test_format__exception_and_unserialisable_values_still_one_line():
    formatter = jsonlog.JsonFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = _record(created=1_796_174_453.0, where=object)
    record.exc_info = exc_info

    line = formatter.format(record)

    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["where"] == str(object)
    assert "ValueError: boom" in parsed["exc"]


def test_lean_records__lines_unchanged(restored_logging):
    formatter = jsonlog.JsonFormatter()
    before = formatter.format(_record(created=1_796_174_453.5, token=1))

    jsonlog.lean_records()
    after = formatter.format(_record(created=1_796_174_453.5, token=1))

    assert after == before
    lean = _record(created=1_796_174_453.5)
    assert (lean.thread, lean.process, lean.processName) == (None, None, None)
