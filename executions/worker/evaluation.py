"""A run's evaluation after its actions: the flow's decision and the request's new data, made
into the final commit's item (executions/queue/finalize.py writes it).

Pure: the evaluator picks the rule(s), target state and outcome; the updates apply to a copy of
the accepted data, which must pass the flow's dataSchema and the size limit. A failure of any of
these is the decision that ends the run (FAILED under the usual rule), never a partial write.
"""

from typing import Any

from ..flows.evaluator import DecisionError, UpdateError, apply_updates, build_context, decide
from ..flows.publication import DataError, validate_data
from ..queue.claims import Snapshot
from ..queue.finalize import FinalizeItem
from ..queue.leases import Fence
from . import recovery
from .recovery import Decision


def final_item(
    *,
    fence: Fence,
    definition: dict[str, Any],
    transition: dict[str, Any],
    snapshot: Snapshot,
    outputs: dict[str, dict[str, Any]],
    audit: dict[str, Any],
) -> FinalizeItem | Decision:
    """What the final commit writes for this holder; or the decision that ends the run."""
    context = build_context(snapshot.data, outputs)
    try:
        decision = decide(transition, context)
        data = apply_updates(transition, snapshot.data, context)
        validate_data(definition, data)
    except (DecisionError, UpdateError, DataError) as exc:
        return recovery.fail(exc.code, exc.detail)
    action_ids = [a["id"] for a in transition.get("actions", [])]
    return FinalizeItem(
        fence=fence,
        from_state=snapshot.state,
        accepted_revision=snapshot.accepted_revision,
        request_version=snapshot.version,
        action_ids=action_ids,
        data=data,
        target_state=decision.target,
        result={"outcome": decision.outcome, "targetState": decision.target},
        payload={
            **audit,
            "actionIds": action_ids,
            "hitPolicy": decision.hit_policy,
            "ruleIds": list(decision.rule_ids),
        },
    )
