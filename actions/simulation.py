"""Simulation capabilities for demos, process tests and benchmarks; never for production.

They resolve only when SIMULATION_MODE is true (actions/registry.py), like NO_OP, and are never
routable from INTEGRATIONS_FILE. Each declares its effect in code.

- `SIM_SLEEP@1` (READ_ONLY): waits `input.seconds` (0 to 300), watching `ctx.cancelled`, and
  returns `{"slept": seconds, "attempt": n}`. Cancelled midway it reports a TRANSIENT
  interruption: a read has no effect to be uncertain about.
"""

from .base import ActionContext, ActionResult, Binding, Contract, Outcome, Route

MAX_SLEEP_SECONDS = 300  # seconds a SIM_SLEEP action may ask for


class SleepAdapter:
    """Sleep for the requested time, or until this execution is told to stop."""

    name = "simulation.sleep"
    fixed_effect = "READ_ONLY"

    async def call(self, ctx: ActionContext, binding: Binding) -> ActionResult:
        seconds = float(ctx.input["seconds"])
        if await ctx.cancelled.wait(seconds):
            return ActionResult(
                outcome=Outcome.TRANSIENT,
                error_code="INTERRUPTED",
                error_detail="stopped before the sleep ended",
            )
        return ActionResult(
            outcome=Outcome.SUCCEEDED, output={"slept": seconds, "attempt": ctx.attempt}
        )


SIM_SLEEP = Binding(
    contract=Contract(
        capability="SIM_SLEEP",
        version=1,
        effect="READ_ONLY",
        max_attempts=3,
        timeout_seconds=MAX_SLEEP_SECONDS,
        input_schema={
            "type": "object",
            "required": ["seconds"],
            "properties": {
                "seconds": {"type": "number", "minimum": 0, "maximum": MAX_SLEEP_SECONDS}
            },
        },
        output_schema={"type": "object", "required": ["slept"]},
    ),
    route=Route(capability="SIM_SLEEP", version=1, adapter=SleepAdapter.name),
    adapter=SleepAdapter(),
)

# What actions/registry.py adds to its simulation capabilities.
SIMULATION_BINDINGS: dict[str, Binding] = {"SIM_SLEEP@1": SIM_SLEEP}
