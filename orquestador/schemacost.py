"""What validating against a flow's schema can cost, in steps (ADR 26): a keyword run, one per
entry of a list or map it loops over, REF_STEPS per `$ref` (at run time, ERROR_STEPS per error).
- `keyword_steps(keyword, value)`: a keyword's steps, counted alike here and by the validator's
  budget (orquestador/schemas.py, which adds what the document makes it loop over);
- `cost_problems(schema, path, uri)`: refused at publication, with its path, a part of a schema
  whose **schema cost** (the steps one value of a document can meet, `$ref`s followed, at every
  depth a document can reach) passes MAX_SCHEMA_COST, and a `$ref` cycle that never descends into
  the document. Recursion that does descend (trees) is admitted, its cost counted at every depth.
"""

from collections.abc import Iterator
from typing import Any

from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from .patterns import _member  # one notation for every schema path
from .strictjson import MAX_DEPTH

Resolver = Any  # referencing's Resolver, which it does not export

# Steps one value of a document may meet. A value of a hand-written schema meets tens of steps,
# a few thousand with a long enum or hundreds of properties; 10,000 steps take 10 to 50 ms. The
# "$defs fan-out" bomb (`anyOf` of ten `$ref`s to the level below) passes it from 3 levels on.
MAX_SCHEMA_COST = 10_000  # steps
# Measured on jsonschema 4.26 against a keyword's time: following a `$ref` (a lookup, a new
# resolver, a descent) costs about ten, an error (built, then handed up each level) about four.
REF_STEPS = 10  # steps
ERROR_STEPS = 4  # steps, charged by the validator's budget at each level an error passes
# Bounds the check itself: at most this many (schema part, depth) costs are computed, which a
# schema of the largest flow body (1 MiB) stays well within unless it recurses at every level.
MAX_CHECK_STATES = 500_000  # states

REFERENCES = ("$ref", "$dynamicRef")
# Applicators whose subschemas apply to the same value of the document.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
_IN_PLACE_MAP = ("dependentSchemas",)
# Applicators whose subschemas apply one level down (a member, an item, a key).
_MEMBER_ONE = ("additionalProperties", "unevaluatedProperties", "propertyNames")
_ITEM_ONE = ("items", "contains", "unevaluatedItems")
_DEFINITIONS = ("$defs", "definitions")
# Their evaluation walks the schema's in-place parts once more (jsonschema's annotations).
_UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")


def keyword_steps(keyword: str, value: Any) -> int:
    """The steps of running `keyword` once, as far as the schema decides them."""
    steps = 1
    if isinstance(value, (list, dict)) and keyword not in _DEFINITIONS:
        steps += len(value)
    if keyword in REFERENCES:
        steps += REF_STEPS
    return steps


class _Refused(Exception):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path, self.message = path, message


class _Cost:
    """Schema costs of one schema's parts, memoised per (part, depth) and capped at the bound."""

    def __init__(self, schema: dict, path: str, uri: str) -> None:
        resource = DRAFT202012.create_resource(schema)
        self.root_resolver = Registry().with_resource(uri, resource).crawl().resolver(base_uri=uri)
        self.paths: dict[int, str] = {}
        self.dynamic: dict[str, list[tuple[Any, Resolver]]] = {}
        self._index(schema, path, self.root_resolver)
        self.memo: dict[tuple[int, int], int] = {}
        self.zero: dict[int, int] = {}  # the lowest depth at which a part costs nothing
        self.busy: set[tuple[int, int]] = set()
        self.states = 0

    def _index(self, node: Any, path: str, resolver: Resolver) -> None:
        """Every part's path, and the parts a `$dynamicRef` may land on."""
        stack = [(node, path, resolver)]
        while stack:
            node, path, resolver = stack.pop()
            if not isinstance(node, dict) or id(node) in self.paths:
                continue
            self.paths[id(node)] = path
            resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
            anchor = node.get("$dynamicAnchor")
            if isinstance(anchor, str):
                self.dynamic.setdefault(anchor, []).append((node, resolver))
            for child, where in _all_parts(node, path):
                stack.append((child, where, resolver))

    def _targets(self, node: dict, resolver: Resolver) -> Iterator[tuple[str, list]]:
        """For each reference of `node`: (its location, the parts it may land on)."""
        path = self.paths.get(id(node), "$")
        for keyword in REFERENCES:
            ref = node.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                resolved = resolver.lookup(ref)
            except Unresolvable:
                continue  # reported by the reference check
            targets = [(resolved.contents, resolved.resolver)]
            if keyword == "$dynamicRef" and "#" in ref:
                targets += self.dynamic.get(ref.split("#", 1)[1], [])
            yield _member(path, keyword), targets

    def cost(self, node: Any, depth: int, resolver: Resolver) -> int:
        """The steps one value `depth` levels below where `node` applies can meet, capped."""
        if not isinstance(node, dict):
            return 1 if depth == 0 else 0
        key = (id(node), depth)
        if depth >= self.zero.get(id(node), MAX_DEPTH + 1):
            return 0
        if key in self.memo:
            return self.memo[key]
        if key in self.busy:
            raise _Cycle()
        self.states += 1
        if self.states > MAX_CHECK_STATES:
            raise _Refused(
                self.paths.get(id(node), "$"),
                f"is too large to bound the cost of validating against it (more than "
                f"{MAX_CHECK_STATES} parts and depths to weigh)",
            )
        self.busy.add(key)
        try:
            total = self._cost(node, depth, resolver)
        finally:
            self.busy.discard(key)
        total = min(total, MAX_SCHEMA_COST + 1)
        self.memo[key] = total
        if total == 0:
            self.zero[id(node)] = min(depth, self.zero.get(id(node), depth))
        return total

    def _cost(self, node: dict, depth: int, resolver: Resolver) -> int:
        resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        total = sum(keyword_steps(k, v) for k, v in node.items()) if depth == 0 else 0
        for child in _in_place(node):
            total += self.cost(child, depth, resolver)
        for where, targets in self._targets(node, resolver):
            try:
                total += max(self.cost(t, depth, r) for t, r in targets)
            except _Cycle:
                raise _Refused(
                    where,
                    "is a $ref cycle that never descends into the document: validating would "
                    "follow it forever",
                ) from None
        if depth > 0:
            total += max(
                self._member(node, depth - 1, resolver), self._item(node, depth - 1, resolver)
            )
        return total * (1 + sum(k in node for k in _UNEVALUATED))

    def _member(self, node: dict, depth: int, resolver: Resolver) -> int:
        """The most one member of an object meets: its property's schema or the additional
        one, every patternProperties schema it may match, and the rest."""
        properties = node.get("properties")
        named = (
            [self.cost(s, depth, resolver) for s in properties.values()]
            if isinstance(properties, dict)
            else []
        )
        additional = (
            self.cost(node["additionalProperties"], depth, resolver)
            if "additionalProperties" in node
            else 0
        )
        total = max([additional, *named])
        patterns = node.get("patternProperties")
        if isinstance(patterns, dict):
            total += sum(self.cost(s, depth, resolver) for s in patterns.values())
        for keyword in ("unevaluatedProperties", "propertyNames"):
            if keyword in node:
                total += self.cost(node[keyword], depth, resolver)
        return total

    def _item(self, node: dict, depth: int, resolver: Resolver) -> int:
        """The most one item of an array meets."""
        prefix = node.get("prefixItems")
        positional = (
            [self.cost(s, depth, resolver) for s in prefix] if isinstance(prefix, list) else []
        )
        rest = self.cost(node["items"], depth, resolver) if "items" in node else 0
        total = max([rest, *positional])
        for keyword in ("contains", "unevaluatedItems"):
            if keyword in node:
                total += self.cost(node[keyword], depth, resolver)
        return total

    def culprit(self, node: Any, depth: int, resolver: Resolver) -> str:
        """The deepest part over the bound whose parts are each within it: where costs add up."""
        while isinstance(node, dict):
            resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
            over = [(c, depth) for c in _in_place(node)]
            for _, targets in self._targets(node, resolver):
                over += [(t, depth) for t, _ in targets]
            if depth > 0:
                over += [(c, depth - 1) for c in _one_down(node)]
            for child, at in over:
                if self.cost(child, at, resolver) > MAX_SCHEMA_COST and id(child) in self.paths:
                    node, depth = child, at
                    break
            else:
                break
        return self.paths.get(id(node), "$")


class _Cycle(Exception):
    pass


def cost_problems(schema: dict, path: str, uri: str) -> list[tuple[str, str]]:
    """Why validating against `schema` (a checked, self-contained schema whose references resolve
    under `uri`) could cost too much, as (path, message); empty when its cost is bounded."""
    try:
        check = _Cost(schema, path, uri)
        for depth in range(MAX_DEPTH + 1):
            cost = check.cost(schema, depth, check.root_resolver)
            if cost > MAX_SCHEMA_COST:
                where = check.culprit(schema, depth, check.root_resolver)
                return [
                    (
                        where,
                        f"validating one value of a document against it could take more than "
                        f"{MAX_SCHEMA_COST} steps (a step: a keyword run, an entry of a list or "
                        f"map it loops over, a $ref followed): too many alternatives, references "
                        f"or entries meet at one value",
                    )
                ]
            if cost == 0:
                break
    except _Refused as refused:
        return [(refused.path, refused.message)]
    except RecursionError:
        return [(path, "nests too deeply, through its $refs, to bound the cost of validating it")]
    return []


def _in_place(node: dict) -> Iterator[Any]:
    for keyword in _IN_PLACE_ONE:
        if keyword in node:
            yield node[keyword]
    for keyword in _IN_PLACE_MANY:
        if isinstance(node.get(keyword), list):
            yield from node[keyword]
    for keyword in _IN_PLACE_MAP:
        if isinstance(node.get(keyword), dict):
            yield from node[keyword].values()


def _one_down(node: dict) -> Iterator[Any]:
    for keyword in (*_MEMBER_ONE, *_ITEM_ONE):
        if keyword in node:
            yield node[keyword]
    for keyword in ("properties", "patternProperties"):
        if isinstance(node.get(keyword), dict):
            yield from node[keyword].values()
    if isinstance(node.get("prefixItems"), list):
        yield from node["prefixItems"]


def _all_parts(node: dict, path: str) -> Iterator[tuple[Any, str]]:
    """Every subschema directly under `node`, with its path."""
    for keyword in (*_IN_PLACE_ONE, *_MEMBER_ONE, *_ITEM_ONE):
        if keyword in node:
            yield node[keyword], _member(path, keyword)
    for keyword in (*_IN_PLACE_MANY, "prefixItems"):
        if isinstance(node.get(keyword), list):
            at = _member(path, keyword)
            yield from ((s, f"{at}[{i}]") for i, s in enumerate(node[keyword]))
    for keyword in (*_IN_PLACE_MAP, *_DEFINITIONS, "properties", "patternProperties"):
        if isinstance(node.get(keyword), dict):
            at = _member(path, keyword)
            yield from ((s, _member(at, name)) for name, s in node[keyword].items())
