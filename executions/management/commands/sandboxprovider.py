import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from actions.sandbox import (
    DEFAULT_FAIL_AFTER_APPLY,
    DEFAULT_FAIL_BEFORE_APPLY,
    DEFAULT_PORT,
    Faults,
    SandboxProvider,
    faults_problem,
)

PREFIX = "[sandbox] "  # every line this command prints


class Command(BaseCommand):
    help = (
        "Serve the demo's provider on 127.0.0.1 (reserve, release, charge, refund, lookups by "
        "key) until SIGTERM or Ctrl-C. It sometimes fails a write: applied, or not, and the "
        "connection dropped unanswered. Its state is kept in memory only."
    )
    requires_system_checks = []  # it needs no database and no integrations file

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0: any free port")
        parser.add_argument(
            "--fail-after-apply",
            type=float,
            default=DEFAULT_FAIL_AFTER_APPLY,
            metavar="FRACTION",
            help="writes applied and then left unanswered (connection dropped)",
        )
        parser.add_argument(
            "--fail-before-apply",
            type=float,
            default=DEFAULT_FAIL_BEFORE_APPLY,
            metavar="FRACTION",
            help="writes dropped unanswered before anything is applied",
        )
        parser.add_argument(
            "--seed", type=int, default=None, help="seed of the fault draws, for a repeatable run"
        )

    def handle(
        self,
        *args: Any,
        port: int,
        fail_after_apply: float,
        fail_before_apply: float,
        seed: int | None,
        **options: Any,
    ) -> None:
        faults = Faults(after_apply=fail_after_apply, before_apply=fail_before_apply)
        problem = faults_problem(faults)
        if problem:
            raise CommandError(problem)
        if not 0 <= port <= 65535:
            raise CommandError(f"--port: must be between 0 and 65535, got {port}")
        try:
            provider = SandboxProvider(port=port, faults=faults, seed=seed, log=self._line)
        except OSError as exc:
            raise CommandError(
                f"--port {port}: cannot listen on 127.0.0.1: {exc.strerror}"
            ) from None
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        serving = threading.Thread(target=provider.serve_forever, name="sandbox")
        serving.start()
        self._line(
            f"sandbox provider on {provider.url()} (fails {faults.after_apply:.0%} of writes after "
            f"applying them, {faults.before_apply:.0%} before); SIGTERM or Ctrl-C stops it"
        )
        stop.wait()
        provider.close()
        serving.join()
        self._line("sandbox provider stopped")

    def _line(self, text: str) -> None:
        # One line per write, prefixed so it stands out among the worker's JSON lines in the
        # scripts/start terminal; on a terminal, what did not simply apply is also coloured.
        plain = "dropped" not in text and "refused" not in text
        style = self.style.HTTP_INFO if plain else self.style.WARNING
        self.stdout.write(f"{PREFIX}{text}", style_func=style)
        self.stdout.flush()
