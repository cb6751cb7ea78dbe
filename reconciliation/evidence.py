"""What an operator sees, and what a resolution records, about an uncertain write.

Evidence is a JSON-ready snapshot of facts the system already holds (a checkpoint's effect,
status, attempt, external key, input hash, timestamps and error code) plus, where the route has
one, the provider's answer to a lookup by external key. A lookup names the attempt it was asked
about, and is evidence about that attempt only. It never carries a checkpoint's input, a raw
provider response or a credential: error details are the adapters' safe text, and even that is
cut short, because an audit event lives forever.
"""

from datetime import datetime
from typing import Any

from actions.base import LookupResult
from executions.models import ActionExecution, CheckpointStatus
from executions.queue.outputs import MAX_OUTPUT_BYTES, json_size, output_errors
from orquestador.display import clip

# A checkpoint in one of these statuses may or may not have had its effect.
UNCERTAIN_STATUSES = (
    CheckpointStatus.RUNNING,
    CheckpointStatus.UNKNOWN,
    CheckpointStatus.ACCEPTED,  # an asynchronous provider's call whose callback never came
)
SAFE_DETAIL_CHARS = 300  # characters of an error detail shown or recorded
LOOKUP_DETAIL_CHARS = 500  # characters of a lookup's detail recorded


def is_uncertain(checkpoint: ActionExecution) -> bool:
    return checkpoint.status in UNCERTAIN_STATUSES


def lookup_attempt(lookup: dict[str, Any]) -> int:
    """The attempt of the write a recorded lookup was asked about.

    Lookups recorded before they named their attempt count as about attempt 1: a later attempt
    then never takes an answer given before it was sent (at worst such a lookup is ignored)."""
    attempt = lookup.get("attempt")
    return 1 if attempt is None else int(attempt)


def speaks_of(lookup: dict[str, Any], checkpoint: ActionExecution) -> bool:
    """Whether a recorded lookup is evidence about the checkpoint's current attempt."""
    return lookup.get("actionId") == checkpoint.action_id and (
        lookup_attempt(lookup) == checkpoint.attempt
    )


def safe_error(checkpoint: ActionExecution) -> str:
    """The checkpoint's error as an operator may read it: the code, then a short safe detail."""
    if not checkpoint.error_code and not checkpoint.error_detail:
        return ""
    detail = clip(checkpoint.error_detail, SAFE_DETAIL_CHARS)
    return (
        f"{checkpoint.error_code or 'ERROR'}: {detail}" if detail else (checkpoint.error_code or "")
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def checkpoint_evidence(checkpoint: ActionExecution) -> dict[str, Any]:
    """A JSON-ready snapshot of a checkpoint, without its input or output."""
    return {
        "actionId": checkpoint.action_id,
        "sequence": checkpoint.sequence,
        "capability": checkpoint.capability,
        "capabilityVersion": checkpoint.capability_version,
        "effect": checkpoint.effect,
        "status": checkpoint.status,
        "attempt": checkpoint.attempt,
        "externalKey": checkpoint.external_key,
        "inputHash": checkpoint.input_hash,
        "fencingToken": checkpoint.fencing_token,
        "errorCode": checkpoint.error_code,
        "error": safe_error(checkpoint),
        "startedAt": _iso(checkpoint.started_at),
        "finishedAt": _iso(checkpoint.finished_at),
    }


def lookup_evidence(
    result: LookupResult, checkpoint: ActionExecution, output_schema: dict[str, Any]
) -> dict[str, Any]:
    """The provider's answer about one checkpoint's write, as recorded in the audit trail."""
    output = result.output if result.happened else None
    problems = output_errors(output, output_schema) if output is not None else []
    too_large = output is not None and json_size(output) > MAX_OUTPUT_BYTES
    return {
        "actionId": checkpoint.action_id,
        "capability": checkpoint.capability,
        "capabilityVersion": checkpoint.capability_version,
        "externalKey": checkpoint.external_key,
        # The attempt asked about, read before the provider was: an answer about one attempt
        # says nothing about a later one (a replay sent after it).
        "attempt": checkpoint.attempt,
        "happened": result.happened,
        # The provider's output object, only when it says the write happened and it fits.
        "output": None if too_large else output,
        "outputValid": None if output is None else not problems,
        "outputProblems": problems,
        "detail": clip(result.detail, LOOKUP_DETAIL_CHARS),
    }
