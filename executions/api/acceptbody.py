"""The acceptance's body, read on its hot path: a body that is plainly valid is taken as it is;
any other goes through TransitionAcceptSerializer, which refuses it naming the field and why.

"Plainly valid" is read from the serializer's own fields, once (`plain_check`): exactly its
fields, each a string within its lengths with no NUL and no surrogate (as CharField refuses), or
an integer (not a boolean) within its bounds. So it is a subset of what the serializer takes
unchanged, never more, and cannot drift from it: a field with any other rule fails the derivation
at import. Validating with the serializer cost an acceptance 57 µs, the check under one; a
client's body nearly always is plainly valid. tests/integration/api/test_render.py holds the two.
"""

import re
from collections.abc import Callable
from typing import Any

from django.core import validators
from rest_framework import serializers
from rest_framework.request import Request as DrfRequest
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from .base import json_body
from .serializers import (
    NO_NUL,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    TransitionAcceptSerializer,
)

# What a string's validators refuse beside its length: NUL (NO_NUL, and CharField's own) and
# surrogates (CharField's own).
_REFUSED_CHARACTERS = re.compile("[\x00\ud800-\udfff]")
_TEXT_RULES = (
    validators.MinLengthValidator,
    validators.MaxLengthValidator,
    validators.ProhibitNullCharactersValidator,
    ProhibitSurrogateCharactersValidator,
)
_INTEGER_RULES = (validators.MinValueValidator, validators.MaxValueValidator)

Rule = tuple[str, type, int, int]  # a field's name, its type (str or int), its bounds


def _rule(serializer: serializers.Serializer, name: str, field: serializers.Field) -> Rule:
    """What `field` takes unchanged, when a plain check can tell; ValueError otherwise."""
    plain = (
        field.required
        and not field.allow_null
        and not field.read_only
        and field.source == name
        and getattr(serializer, f"validate_{name}", None) is None
    )
    if plain and type(field) is StrictCharField:
        checked = all(v is NO_NUL or isinstance(v, _TEXT_RULES) for v in field.validators)
        if checked and not field.trim_whitespace and field.max_length is not None:
            # Without allow_blank, an empty string is refused whatever min_length says.
            low = max(field.min_length or 0, 0 if field.allow_blank else 1)
            return name, str, low, field.max_length
    if plain and type(field) is StrictIntegerField:
        checked = all(isinstance(v, _INTEGER_RULES) for v in field.validators)
        if checked and field.min_value is not None and field.max_value is not None:
            return name, int, field.min_value, field.max_value
    raise ValueError(f"{name}: a plain check cannot vouch for this field's rules")


def plain_check(serializer_class: type[StrictSerializer]) -> Callable[[Any], bool]:
    """Whether a body is one `serializer_class` takes as it is, read from its fields once."""
    serializer = serializer_class()
    if type(serializer).validate is not serializers.Serializer.validate:
        raise ValueError(f"{serializer_class.__name__}: a plain check cannot vouch for validate()")
    rules = [_rule(serializer, name, field) for name, field in serializer.fields.items()]
    names = frozenset(serializer.fields)

    def plainly_valid(body: Any) -> bool:
        if type(body) is not dict or body.keys() != names:
            return False
        for name, kind, low, high in rules:
            value = body[name]
            if kind is str:
                if type(value) is not str or not low <= len(value) <= high:
                    return False
                if _REFUSED_CHARACTERS.search(value):
                    return False
            elif type(value) is not int or not low <= value <= high:
                return False
        return True

    return plainly_valid


plainly_valid = plain_check(TransitionAcceptSerializer)


def accept_body(request: DrfRequest) -> dict[str, Any]:
    """The acceptance's validated body: {transitionId, expectedRevision}."""
    body = json_body(request)
    if plainly_valid(body):
        return body
    serializer = TransitionAcceptSerializer(data=body)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
