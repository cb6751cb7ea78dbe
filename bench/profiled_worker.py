"""`manage.py runworker` under cProfile, timed by its own thread's CPU: bench/workercpu.py.

    python bench/profiled_worker.py TREE   (the environment of runworker, plus BENCH_PROFILE_FILE)

TREE is the code to run (this checkout, or another one beside it for an A/B). The profile
covers the event loop's thread only (time.thread_time: CPU, not waiting), from the start of the
command to the end of its drain, and is written with pstats' dump to BENCH_PROFILE_FILE.
"""

import cProfile
import os
import sys
import time


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orquestador.settings")
    import django

    django.setup()
    from django.core.management import call_command

    profile = cProfile.Profile(time.thread_time)
    profile.enable()
    try:
        call_command("runworker")
    finally:
        profile.disable()
        profile.dump_stats(os.environ["BENCH_PROFILE_FILE"])


if __name__ == "__main__":
    main()
