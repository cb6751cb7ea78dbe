"""JSON Schema validation of data, inputs and outputs: the one place validators are built, for
the API (a request's data against its flow's `dataSchema`), the runner (an action's input and
output against its contract) and reconciliation evidence.

Invariants: every validator is built by `_build`, with `pattern` searched in linear time (RE2,
orquestador/patterns.py); a flow's `dataSchema` is checked without formats (annotations in Draft
2020-12), a contract's schemas with them; a schema that asserts only `"type": "object"` answers
an instance it plainly accepts without a validator, every other answer and error comes from the
validator; the cache is keyed by the schema object and bounded (`CACHE_SIZE`).
"""

import threading
from collections import OrderedDict
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.protocols
import jsonschema.validators

from . import patterns

# Draft 2020-12 with every `pattern` searched in linear time.
DRAFT = patterns.linear_validator(jsonschema.Draft202012Validator)
# Bounded: long-lived schemas (cached flows, registered contracts) are built once per process, and
# one loaded per API call costs at most one build and is forgotten.
CACHE_SIZE = 512  # validators kept per process, least recently used dropped first

_cache: OrderedDict[tuple[int, bool], tuple[Any, jsonschema.protocols.Validator]] = OrderedDict()
_cache_lock = threading.Lock()


def _build(schema: dict | bool, *, formats: bool) -> jsonschema.protocols.Validator:
    """Compile one validator (Draft 2020-12 unless the schema names another)."""
    cls = patterns.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER) if formats else cls(schema)


def validator(schema: dict | bool, *, formats: bool) -> jsonschema.protocols.Validator:
    """The validator of `schema`, built once while the schema object lives and is used."""
    key = (id(schema), formats)
    with _cache_lock:
        cached = _cache.get(key)
        # The entry keeps its schema alive, so an id in the cache is never reused by another
        # object; the identity test guards against it anyway.
        if cached is not None and cached[0] is schema:
            _cache.move_to_end(key)
            return cached[1]
    built = _build(schema, formats=formats)
    with _cache_lock:
        _cache[key] = (schema, built)
        _cache.move_to_end(key)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return built


# Keywords that annotate and never assert: a schema of these alone accepts anything.
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "title",
        "description",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)


def _plainly_valid(schema: dict | bool, instance: Any) -> bool:
    """Whether `instance` keeps `schema` with no validator to ask: the schema asserts nothing,
    or only `"type": "object"` and the instance is an object. False means "ask the validator",
    not "invalid"; a check of a few µs less per input, output and final data of a run."""
    if schema is True:
        return True
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind is None:
        return schema.keys() <= _ANNOTATIONS
    return (
        kind == "object" and isinstance(instance, dict) and schema.keys() - _ANNOTATIONS == {"type"}
    )


def best_error(
    schema: dict, instance: Any, *, formats: bool
) -> jsonschema.exceptions.ValidationError | None:
    """The most relevant error of `instance` against `schema`, or None when it is valid."""
    if _plainly_valid(schema, instance):
        return None
    checker = validator(schema, formats=formats)
    if checker.is_valid(instance):  # the common case, without building any error
        return None
    return jsonschema.exceptions.best_match(checker.iter_errors(instance))


def contract_problem(schema: dict, instance: Any) -> str | None:
    """Why `instance` breaks a contract's input or output schema (`$.path: message`), or None."""
    error = best_error(schema, instance, formats=True)
    return None if error is None else f"{error.json_path}: {error.message}"


def contract_errors(schema: dict, instance: Any, *, limit: int) -> list[tuple[str, str]]:
    """Up to `limit` (path, message) errors of `instance` against a contract schema, in path
    order; empty when it is valid."""
    if _plainly_valid(schema, instance):
        return []
    checker = validator(schema, formats=True)
    if checker.is_valid(instance):
        return []
    found = sorted(checker.iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [("/".join(map(str, e.absolute_path)), e.message) for e in found[:limit]]


def schema_errors(schema: dict) -> list[jsonschema.exceptions.ValidationError]:
    """Why `schema` is not a valid schema of its draft (Draft 2020-12 unless it names another),
    checked against that draft's meta-schema with format checks; empty when it is."""
    meta = jsonschema.validators.validator_for(schema, default=DRAFT).META_SCHEMA
    return list(validator(meta, formats=True).iter_errors(schema))
