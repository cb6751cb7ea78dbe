"""JSON Schema validation of data, inputs and outputs: the one place validators are built, for
the API (a request's data against its flow's `dataSchema`), the runner (an action's input and
output against its contract) and reconciliation evidence.

Invariants: every validator is built by `_build`, `pattern` (RE2) and `uniqueItems` linear;
a flow's schemas are checked without formats, within MAX_VALIDATION_STEPS (`data_error`,
`data_errors`: one document's cost bounded whatever the schema, ADR 26), a contract's with
formats; a schema asserting only `"type": "object"` answers an instance it plainly accepts
without a validator; the cache is keyed by the schema object and bounded (`CACHE_SIZE`).
"""

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.protocols
import jsonschema.validators

from . import patterns
from .schemacost import ERROR_STEPS, keyword_steps

# Draft 2020-12 with every `pattern` searched in linear time.
DRAFT = patterns.linear_validator(jsonschema.Draft202012Validator)
# Bounded: long-lived schemas (cached flows, registered contracts) are built once per process, and
# one loaded per API call costs at most one build and is forgotten.
CACHE_SIZE = 512  # validators kept per process, least recently used dropped first

# Steps (orquestador/schemacost.py) one document may take against a flow's schema. The densest
# 256 KiB document against a plain schema takes about 500,000 (128,000 numbers, each meeting
# three keywords); twice that leaves room for richer schemas, and the costliest steps known
# (anyOf over $refs, every branch failing) run 1,000,000 in about 3 s on one core.
MAX_VALIDATION_STEPS = 1_000_000  # steps
# Keywords that loop over the document's members or items as well as over their own value.
_DOCUMENT_LOOPS = frozenset(
    {
        "patternProperties",
        "additionalProperties",
        "unevaluatedProperties",
        "propertyNames",
        "items",
        "prefixItems",
        "contains",
        "unevaluatedItems",
        "uniqueItems",
    }
)


class ValidationTooCostly(Exception):
    """Validating one document against a flow's schema passed MAX_VALIDATION_STEPS, or nested
    deeper than the validator can follow; the message completes "validating it ..."."""


_budget: ContextVar[list[int] | None] = ContextVar("schema_budget", default=None)

_cache: OrderedDict[tuple[int, bool], tuple[Any, jsonschema.protocols.Validator]] = OrderedDict()
_cache_lock = threading.Lock()


def _build(schema: dict | bool, *, formats: bool) -> jsonschema.protocols.Validator:
    """Compile one validator (Draft 2020-12 unless the schema names another); a flow's schemas
    (without formats) on a class that spends the budget of `_within_budget`."""
    cls = _bounded(patterns.validator_for(schema), metered=not formats)
    return cls(schema, format_checker=cls.FORMAT_CHECKER) if formats else cls(schema)


_classes: dict[tuple[type, bool], type] = {}
_classes_lock = threading.Lock()


def _bounded(cls: type, *, metered: bool) -> Any:
    """`cls` with a linear `uniqueItems` and, when `metered`, every keyword spending steps."""
    with _classes_lock:
        bounded = _classes.get((cls, metered))
        if bounded is None:
            keywords = dict(cls.VALIDATORS, uniqueItems=_unique_items)  # type: ignore[attr-defined]
            if metered:
                keywords = {name: _metered(name, fn) for name, fn in keywords.items()}
            bounded = _classes[(cls, metered)] = jsonschema.validators.extend(cls, keywords)
        return bounded


def _metered(keyword: str, fn: Any) -> Any:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _budget.get()
        if budget is None:
            return fn(validator, value, instance, schema)
        steps = keyword_steps(keyword, value)
        if keyword in _DOCUMENT_LOOPS and isinstance(instance, (list, dict)):
            loops = len(schema.get("patternProperties") or ()) if isinstance(schema, dict) else 0
            steps += len(instance) * (1 + loops)
        _spend(budget, steps)
        errors = fn(validator, value, instance, schema)
        return None if errors is None else _spending(budget, errors)

    return run


def _spend(budget: list[int], steps: int) -> None:
    budget[0] -= steps
    if budget[0] < 0:
        raise ValidationTooCostly(f"would take more than {MAX_VALIDATION_STEPS} steps")


def _spending(budget: list[int], errors: Any) -> Iterator[Any]:
    """The keyword's errors, each ERROR_STEPS: a failing branch costs more than a passing one."""
    for error in errors:
        _spend(budget, ERROR_STEPS)
        yield error


@contextlib.contextmanager
def _within_budget() -> Iterator[None]:
    token = _budget.set([MAX_VALIDATION_STEPS])
    try:
        yield
    except RecursionError:
        raise ValidationTooCostly("nests deeper than the validator can follow") from None
    finally:
        _budget.reset(token)


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's `uniqueItems` compares every pair of unsortable items (quadratic: 8,000
    objects took 75 s); equal items have equal `_frozen` keys, so a set does it in one pass."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _frozen(item)
        if key in seen:
            yield jsonschema.exceptions.ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _frozen(value: Any) -> Any:
    """A hashable key equal for JSON-equal values, as jsonschema compares them: 1 equals 1.0,
    true does not equal 1, and objects compare whatever their key order."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, list):
        return ("l", tuple(_frozen(item) for item in value))
    if isinstance(value, dict):
        return ("d", frozenset((name, _frozen(item)) for name, item in value.items()))
    return value


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


def data_error(schema: dict | bool, instance: Any) -> jsonschema.exceptions.ValidationError | None:
    """`best_error` for a flow's schema (without formats), within MAX_VALIDATION_STEPS; raises
    ValidationTooCostly past them."""
    if _plainly_valid(schema, instance):
        return None
    checker = validator(schema, formats=False)
    with _within_budget():
        if checker.is_valid(instance):
            return None
        return jsonschema.exceptions.best_match(checker.iter_errors(instance))


def data_errors(schema: dict | bool, instance: Any) -> list[jsonschema.exceptions.ValidationError]:
    """Every error of `instance` against a flow's schema, within MAX_VALIDATION_STEPS; raises
    ValidationTooCostly past them."""
    checker = validator(schema, formats=False)
    with _within_budget():
        return list(checker.iter_errors(instance))


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
