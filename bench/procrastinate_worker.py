"""A plain Procrastinate worker running a no-op task: the baseline of bench/worker.py.

    python bench/procrastinate_worker.py DSN CONCURRENCY

Runs until SIGTERM, listening for notifications like our worker does.
"""

import sys

from procrastinate import App, PsycopgConnector

app = App(connector=PsycopgConnector(conninfo=sys.argv[1] if len(sys.argv) > 1 else ""))


@app.task(name="noop")
async def noop() -> None:
    return None


def main(argv: list[str]) -> None:
    with app.open():
        app.run_worker(concurrency=int(argv[2]), wait=True, listen_notify=True)


if __name__ == "__main__":
    main(sys.argv)
