"""`manage.py runworker` that notes when each execution reaches each hop: bench/cycle.py.

    python bench/cycle_worker.py TREE   (the environment of runworker, plus BENCH_CYCLE_FILE)

TREE is the code to run (this checkout, or another one beside it for an A/B). On the loop's
clock (time.perf_counter) it notes, per execution: the claim statement that brought it (sent,
answered), its slot taken, each grouped write submitted and committed, the adapter call sent
and answered, its slot freed; and per grouped batch: led (waiting for a connection), written.
The marks are wrapped around the tree's own functions, so only the hops it has are noted, and
written as JSON to BENCH_CYCLE_FILE when the command returns.
"""

import json
import os
import sys
import time


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orquestador.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from executions.worker import groupcommit, runner, scheduler, slots

    clock = time.perf_counter
    marks: dict[str, dict[str, float]] = {}
    claims: list[list[float]] = []
    batches: list[list] = []

    def mark(execution_id: object, hop: str) -> None:
        marks.setdefault(str(execution_id), {}).setdefault(hop, clock())

    claim_run = scheduler.run_async

    async def claimed(conn, plan):
        sent = clock()
        dispatches = await claim_run(conn, plan)
        back = clock()
        claims.append([sent, back, len(dispatches)])
        for dispatch in dispatches:
            marks.setdefault(str(dispatch.execution_id), {}).update(claim_sent=sent, claimed=back)
        return dispatches

    scheduler.run_async = claimed

    take, free = slots.Slots.take, slots.Slots.free

    def taken(self, dispatch):
        mark(dispatch.execution_id, "taken")
        return take(self, dispatch)

    def freed(self, holding):
        mark(holding.dispatch.execution_id, "freed")
        return free(self, holding)

    slots.Slots.take, slots.Slots.free = taken, freed
    release = getattr(slots.Slots, "release", None)
    if release is not None:  # a tree whose slot is released at the final commit's submission

        def released(self, holding):
            mark(holding.dispatch.execution_id, "released")
            return release(self, holding)

        slots.Slots.release = released

    writes_init = groupcommit.GroupWrites.__init__

    def named(self, **kwargs):
        writes_init(self, **kwargs)
        for name in ("starts", "successes", "finals"):
            getattr(self, name).bench_name = name

    groupcommit.GroupWrites.__init__ = named
    submit, lead, write = (
        groupcommit.GroupCommit.submit,
        groupcommit.GroupCommit._lead,
        groupcommit.GroupCommit._write,
    )

    async def submitted(self, db, item):
        name = getattr(self, "bench_name", "other")
        mark(item.fence.execution_id, f"{name}_submitted")
        result = await submit(self, db, item)
        mark(item.fence.execution_id, f"{name}_committed")
        return result

    async def led(self, db):
        self.bench_led = clock()
        return await lead(self, db)

    async def written(self, conn, batch):
        started = clock()
        try:
            return await write(self, conn, batch)
        finally:
            led_at = getattr(self, "bench_led", started)
            name = getattr(self, "bench_name", "other")
            batches.append([name, led_at, started, clock(), len(batch)])

    groupcommit.GroupCommit.submit = submitted
    groupcommit.GroupCommit._lead = led
    groupcommit.GroupCommit._write = written

    call = runner._Run.call

    async def called(self, c, snapshot):
        mark(self.fence.execution_id, "call_sent")
        result = await call(self, c, snapshot)
        mark(self.fence.execution_id, "answered")
        return result

    runner._Run.call = called
    try:
        call_command("runworker")
    finally:
        with open(os.environ["BENCH_CYCLE_FILE"], "w") as out:
            json.dump({"executions": marks, "claims": claims, "batches": batches}, out)


if __name__ == "__main__":
    main()
