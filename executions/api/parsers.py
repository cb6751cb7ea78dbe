"""Request bodies: bounded, strict JSON that PostgreSQL can store as it was sent.

Bodies over MAX_BODY_BYTES are refused whatever their size (the declared length is checked
before anything is read; a chunked body arrives here already bounded, with the length it has,
from `orquestador.bodies`); what "strict" refuses beyond that is `orquestador.strictjson`'s to
say. Every refusal is INVALID_BODY, saying why ("the body …").
"""

from typing import Any

from rest_framework.parsers import JSONParser

from orquestador import errors, strictjson
from orquestador.bodies import MAX_BODY_BYTES
from orquestador.errors import CodedError


def _invalid(detail: str) -> CodedError:
    return CodedError(errors.INVALID_BODY, detail)


def check_declared_length(content_length: str | None) -> None:
    """Refuse a body whose declared Content-Length is over MAX_BODY_BYTES, before reading it."""
    declared = (content_length or "").strip()
    # ASCII digits only ('²'.isdigit() is true, and int() refuses it); any number longer than the
    # limit's own digits is over it, whatever its length.
    if declared.isascii() and declared.isdigit():
        if len(declared) > len(str(MAX_BODY_BYTES)) or int(declared) > MAX_BODY_BYTES:
            raise _invalid(f"the body is larger than {MAX_BODY_BYTES} bytes")


def loads(raw: bytes) -> Any:
    """Parse a request body, or raise CodedError(INVALID_BODY) saying what is wrong with it."""
    try:
        return strictjson.loads(raw, max_bytes=MAX_BODY_BYTES)
    except strictjson.JSONRefused as exc:
        raise _invalid(f"the body {exc.reason}") from exc


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, bounded and strict (see the module docstring)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        if stream is None:
            return None
        return loads(stream.read(MAX_BODY_BYTES + 1))
