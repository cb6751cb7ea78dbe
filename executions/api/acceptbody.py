"""The acceptance's body, read on its hot path: a body that is plainly valid is taken as it is;
any other goes through TransitionAcceptSerializer, which refuses it naming the field and why.

"Plainly valid" is a subset of what the serializer accepts, never more: exactly the two fields, a
transitionId that is a string of 1 to MAX_NAME_LENGTH characters with no NUL and no surrogate,
an expectedRevision that is an integer (not a boolean) from 1 to MAX_REVISION. Building the
serializer's fields costs more than the rest of the parsing; a client's body nearly always is
plainly valid. tests/integration/api/test_render.py holds the two paths to one another.
"""

import re
from typing import Any

from rest_framework.request import Request as DrfRequest

from ..flows.problems import MAX_NAME_LENGTH
from .base import json_body
from .serializers import MAX_REVISION, TransitionAcceptSerializer

ACCEPT_FIELDS = frozenset({"transitionId", "expectedRevision"})
_REFUSED_CHARACTERS = re.compile("[\x00\ud800-\udfff]")


def plainly_valid(body: Any) -> bool:
    """Whether `body` is an acceptance TransitionAcceptSerializer takes as it is."""
    if type(body) is not dict or body.keys() != ACCEPT_FIELDS:
        return False
    transition, revision = body["transitionId"], body["expectedRevision"]
    return (
        type(transition) is str
        and 1 <= len(transition) <= MAX_NAME_LENGTH
        and _REFUSED_CHARACTERS.search(transition) is None
        and type(revision) is int
        and 1 <= revision <= MAX_REVISION
    )


def accept_body(request: DrfRequest) -> dict[str, Any]:
    """The acceptance's validated body: {transitionId, expectedRevision}."""
    body = json_body(request)
    if plainly_valid(body):
        return body
    serializer = TransitionAcceptSerializer(data=body)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data
