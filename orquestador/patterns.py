"""`pattern` in every JSON Schema runs on RE2, a linear-time regular-expression engine (Python's
`re` backtracks, and a schema's author is not the text's sender: INTEGRATIONS.md#the-format).

- `linear_validator(cls)`: a jsonschema validator class whose `pattern`, `patternProperties` and
  `additionalProperties` search with RE2; `validator_for` picks the class for a schema's `$schema`
  (Draft 2020-12 by default) and makes it linear;
- `pattern_problems(schema, path)`: every pattern RE2 cannot compile, with its path, so `loadflow`,
  `POST /api/v1/flows` and the integrations check refuse it before anything runs; so is a schema
  pairing `unevaluatedProperties` with `patternProperties` (jsonschema runs that pair on `re`).
"""

import functools
import re
import threading
from collections.abc import Iterator
from typing import Any

import jsonschema
import jsonschema.validators
import re2
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator

MAX_PATTERN_LENGTH = 1000  # characters of one pattern
MAX_PROGRAM_BYTES = 1 << 20  # bytes RE2 may use to compile one pattern

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported by us, with its path
_OPTIONS.max_mem = MAX_PROGRAM_BYTES
_OPTIONS.never_capture = True  # only "does it match" is ever asked


class PatternUnsupported(ValueError):
    """A pattern RE2 cannot compile; the message says why."""


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str) -> Any:
    """The compiled RE2 program for `pattern`, or PatternUnsupported."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternUnsupported(f"is longer than {MAX_PATTERN_LENGTH} characters")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternUnsupported(
            f"is not a pattern the linear-time engine (RE2) accepts: {reason}"
        ) from None


def search(pattern: str, text: str) -> bool:
    return compiled(pattern).search(text) is not None


# ------------------------------------------------------------------------------
# Keywords
# ------------------------------------------------------------------------------
def _unsupported(pattern: str, exc: PatternUnsupported) -> ValidationError:
    # Only a schema published before patterns were checked can get here.
    return ValidationError(f"the schema's pattern {pattern[:60]!r} {exc}")


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Iterator[Any]:
    if not validator.is_type(instance, "string"):
        return
    try:
        matched = search(pattern, instance)
    except PatternUnsupported as exc:
        yield _unsupported(pattern, exc)
        return
    if not matched:
        yield ValidationError(f"{instance[:80]!r} does not match {pattern[:80]!r}")


def _pattern_properties(
    validator: Any, pattern_properties: dict, instance: Any, schema: dict
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        try:
            program = compiled(pattern)
        except PatternUnsupported as exc:
            yield _unsupported(pattern, exc)
            continue
        for name, value in instance.items():
            if program.search(name) is not None:
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: dict) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    programs = []
    for pattern in schema.get("patternProperties", {}):
        try:
            programs.append(compiled(pattern))
        except PatternUnsupported as exc:
            yield _unsupported(pattern, exc)
            return
    extras = [
        name
        for name in instance
        if name not in properties and not any(p.search(name) is not None for p in programs)
    ]
    if validator.is_type(ap, "object"):
        for name in extras:
            yield from validator.descend(instance[name], ap, path=name)
    elif ap is False and extras:
        names = ", ".join(repr(name[:40]) for name in sorted(extras)[:5])
        yield ValidationError(f"additional properties are not allowed ({names} unexpected)")


_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}
_classes: dict[type[Validator], type[Validator]] = {}
_classes_lock = threading.Lock()


def linear_validator(
    cls: type[Validator] = jsonschema.Draft202012Validator,
) -> type[Validator]:
    """`cls` with every pattern searched by RE2 (one class per base, built once)."""
    with _classes_lock:
        linear = _classes.get(cls)
        if linear is None:
            linear = jsonschema.validators.extend(cls, _KEYWORDS)
            _classes[cls] = linear
        return linear


def validator_for(schema: Any) -> type[Validator]:
    """The linear validator class for `schema`'s `$schema` (Draft 2020-12 when absent)."""
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return linear_validator(base)


# ------------------------------------------------------------------------------
# Checking a schema's patterns before it is accepted
# ------------------------------------------------------------------------------
# Keywords whose value is one subschema, a list of subschemas, or a map of name -> subschema.
_ONE = (
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "$defs", "definitions", "dependentSchemas")


def pattern_problems(schema: Any, path: str = "$") -> list[tuple[str, str]]:
    """Every pattern of `schema` RE2 cannot compile, as (path, message); empty when none.

    Paths continue `path` in the project's notation: `$.dataSchema.properties.code.pattern`.
    """
    problems: list[tuple[str, str]] = []
    uses_unevaluated = False
    uses_pattern_properties = False
    stack: list[tuple[Any, str]] = [(schema, path)]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            continue
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            _check(pattern, _member(where, "pattern"), problems)
        uses_unevaluated |= "unevaluatedProperties" in node
        pattern_properties = node.get("patternProperties")
        if isinstance(pattern_properties, dict):
            uses_pattern_properties = True
            for name, subschema in pattern_properties.items():
                at = _member(_member(where, "patternProperties"), name)
                _check(name, at, problems)
                stack.append((subschema, at))
        for keyword in _ONE:
            if isinstance(node.get(keyword), dict):
                stack.append((node[keyword], _member(where, keyword)))
        for keyword in _MANY:
            if isinstance(node.get(keyword), list):
                at = _member(where, keyword)
                stack.extend((item, f"{at}[{i}]") for i, item in enumerate(node[keyword]))
        for keyword in _MAP:
            if isinstance(node.get(keyword), dict):
                stack.extend(
                    (item, _member(_member(where, keyword), name))
                    for name, item in node[keyword].items()
                )
    if uses_unevaluated and uses_pattern_properties:
        problems.append(
            (
                path,
                "unevaluatedProperties together with patternProperties is not supported "
                "(that pair would not run on the linear-time engine); use additionalProperties",
            )
        )
    return sorted(problems)


def _check(pattern: str, where: str, problems: list[tuple[str, str]]) -> None:
    try:
        compiled(pattern)
    except PatternUnsupported as exc:
        problems.append((where, f"pattern {pattern[:60]!r} {exc}"))


_PLAIN_MEMBER = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _member(path: str, name: str) -> str:
    """As `checks.member`: the notation jsonschema uses for JSON paths."""
    if _PLAIN_MEMBER.fullmatch(name):
        return f"{path}.{name}"
    return "{}['{}']".format(path, name.replace("\\", "\\\\").replace("'", "\\'"))
