"""Flow versions (docs/flow-format.md): publication, lookup and validation of request data.

A definition is validated whole by `executions.flows.checks` before anything is stored.
Published versions are immutable: `flow_publish` stores a new key/version once, treats identical
content as a no-op and refuses different content. It owns its transaction; the unique constraint
on (key, version) settles concurrent publishers.
"""

from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from orquestador import errors, strictjson
from orquestador.errors import CodedError
from orquestador.schemas import ValidationTooCostly, data_error
from orquestador.workerconfig import WorkerConfigError

from ..models import Flow
from .canonical import compact_size, sha256_hex
from .checks import validate_definition
from .compensations import Resolve, catalog_problems, declares_compensations, opts_in
from .problems import FlowProblem, short_detail

__all__ = [
    "DataError",
    "FlowConflict",
    "FlowInvalid",
    "FlowProblem",
    "definition_from_json",
    "find_transition",
    "flow_latest",
    "flow_publish",
    "flows_compensation_problems",
    "validate_data",
    "validate_definition",
]


class FlowInvalid(CodedError):
    """The definition breaks the flow format (docs/flow-format.md); `problems` lists every problem
    found."""

    def __init__(self, problems: list[FlowProblem]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        super().__init__(
            errors.FLOW_INVALID,
            f"the flow definition has {count} problem{'s' if count != 1 else ''}: "
            + "; ".join(map(str, self.problems)),
            extra={"problems": [{"path": p.path, "message": p.message} for p in self.problems]},
        )


class FlowConflict(CodedError):
    """This key and version is already published with different content."""

    def __init__(self, detail: str) -> None:
        super().__init__(errors.FLOW_CONFLICT, detail)


class DataError(CodedError):
    """Request data refused by the flow's dataSchema or the size limit."""


# -- public interface ----------------------------------------------------------------------------


def definition_from_json(text: str | bytes) -> Any:
    """Parse flow JSON text strictly (orquestador.strictjson); bad text is FlowInvalid at `$`."""
    try:
        return strictjson.loads(text)
    except strictjson.JSONRefused as exc:
        raise FlowInvalid([FlowProblem("$", f"the flow definition {exc.reason}")]) from exc


def validate_data(definition: dict, data: Any) -> None:
    """Check request data against the size limit and the flow's dataSchema, or raise DataError."""
    try:
        size = compact_size(data)
    except (TypeError, ValueError) as exc:
        raise DataError(errors.DATA_INVALID, f"$: is not JSON ({exc})") from exc
    if size > errors.MAX_DATA_BYTES:
        raise DataError(
            errors.DATA_TOO_LARGE,
            f"data is {size} bytes as compact JSON; the limit is {errors.MAX_DATA_BYTES}",
        )
    try:
        error = data_error(definition["dataSchema"], data)
    except ValidationTooCostly as exc:
        raise DataError(
            errors.DATA_INVALID, f"$: validating it against the dataSchema {exc}"
        ) from None
    if error is not None:
        raise DataError(errors.DATA_INVALID, f"{error.json_path}: {short_detail(error.message)}")


def find_transition(definition: dict, transition_id: str) -> dict | None:
    """Return the transition with this id, or None."""
    for transition in definition.get("transitions", []):
        if transition.get("id") == transition_id:
            return transition
    return None


def _configured_resolve() -> Resolve | None:
    """The process registry's resolve when an INTEGRATIONS_FILE is configured, else None: the
    checks that need the catalog run only where there is one. Raises FlowInvalid when the file
    cannot be loaded."""
    if not settings.INTEGRATIONS_FILE:
        return None
    from actions.registry import IntegrationConfigError, get_registry

    try:
        return get_registry().resolve
    except (IntegrationConfigError, WorkerConfigError) as exc:
        problem = f"the integrations file, needed to check compensations, is not usable: {exc}"
        raise FlowInvalid([FlowProblem("$", problem)]) from None


def _compensation_problems(definition: dict, resolve: Resolve | None) -> list[FlowProblem]:
    transitions = definition.get("transitions", [])
    if not any(opts_in(t) or declares_compensations(t) for t in transitions):
        return []
    resolve = resolve or _configured_resolve()
    return [] if resolve is None else catalog_problems(definition, resolve)


def flow_publish(*, definition: dict, resolve: Resolve | None = None) -> tuple[Flow, bool]:
    """Publish a flow version; return (flow, created). Identical content is a no-op.

    Compensations are checked against the catalog too (`resolve`; by default the configured
    INTEGRATIONS_FILE's, when there is one): docs/flow-format.md#compensation."""
    problems = validate_definition(definition)
    if not problems:
        problems = _compensation_problems(definition, resolve)
    if problems:
        raise FlowInvalid(problems)
    key, version = definition["key"], definition["version"]
    checksum = sha256_hex(definition)
    existing = Flow.objects.filter(key=key, version=version).first()
    if existing is None:
        try:
            with transaction.atomic():
                flow = Flow.objects.create(
                    key=key, version=version, definition=definition, checksum=checksum
                )
            return flow, True
        except IntegrityError:
            # Another publisher committed the same key and version first: compare with theirs.
            existing = Flow.objects.filter(key=key, version=version).first()
            if existing is None:
                raise
    if existing.checksum != checksum:
        raise FlowConflict(
            f"{key}@{version} is already published with different content; "
            "publish a new version instead"
        )
    return existing, False


def flow_latest(*, key: str) -> Flow | None:
    """Return the highest published version of the flow `key`, or None."""
    return Flow.objects.filter(key=key).order_by("-version").first()


def flows_compensation_problems(*, resolve: Resolve) -> list[str]:
    """The start check: what the published flows' compensations break under this catalog, one
    line each (`key@version $.path: message`); such a transition falls back to reconciliation
    at run time."""
    lines = []
    for flow in Flow.objects.order_by("key", "version").only("key", "version", "definition"):
        for problem in _compensation_problems(flow.definition, resolve):
            lines.append(f"{flow} {problem}")
    return lines
