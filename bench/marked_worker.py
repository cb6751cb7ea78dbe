"""`manage.py runworker` whose NO_OP adapter notes when it is called: bench/worker.py's pickup.

    python bench/marked_worker.py   (the environment of runworker, plus BENCH_PICKUP_FILE)

Each NO_OP call appends "<execution id> <time.time()>" to the file BENCH_PICKUP_FILE names, the
time taken first, exactly as bench/procrastinate_worker.py's `pickup` task does: both pickups
end where the work starts (our adapter call, their task), read from the clock the bench reads
at the acceptance (defer) commit. With BENCH_MARK_SCOPE, only the calls of requests whose scope
starts with it are noted (bench/fairness.py marks one tenant's calls beside another's backlog).
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orquestador.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from actions.registry import NoOpAdapter

    marks = os.environ["BENCH_PICKUP_FILE"]
    scope = os.environ.get("BENCH_MARK_SCOPE", "")
    call = NoOpAdapter.call

    async def marked(self, ctx, binding):
        called = time.time()
        if ctx.scope.startswith(scope):
            with open(marks, "a") as out:
                out.write(f"{ctx.execution_id} {called}\n")
        return await call(self, ctx, binding)

    NoOpAdapter.call = marked
    call_command("runworker")


if __name__ == "__main__":
    main()
