from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from executions.queue.history import DEFAULT_BATCH, DEFAULT_PAUSE_SECONDS, MAX_BATCH, history_purge


class Command(BaseCommand):
    help = (
        "Remove the checkpoints, attempt history and payloads of final executions (SUCCEEDED, "
        "FAILED, CANCELLED) finished more than DAYS ago, in short batches; the audit trail is "
        "kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=int, required=True, metavar="DAYS")
        parser.add_argument(
            "--batch", type=int, default=DEFAULT_BATCH, help="executions per transaction"
        )
        parser.add_argument(
            "--pause",
            type=float,
            default=DEFAULT_PAUSE_SECONDS,
            metavar="SECONDS",
            help="pause between batches",
        )

    def handle(self, *args: Any, older_than: int, batch: int, pause: float, **options: Any) -> None:
        if older_than < 1:
            raise CommandError(
                f"--older-than: must be a whole number of days, at least 1, got {older_than}"
            )
        if not 1 <= batch <= MAX_BATCH:
            raise CommandError(f"--batch: must be between 1 and {MAX_BATCH}, got {batch}")
        if not 0 <= pause <= 60:
            raise CommandError(f"--pause: must be between 0 and 60 seconds, got {pause}")
        result = history_purge(older_than_days=older_than, batch=batch, pause_seconds=pause)
        self.stdout.write(
            f"purged {result.executions} executions ({result.checkpoints} checkpoints, "
            f"{result.attempts} earlier attempts, {result.events} events) finished before "
            f"{result.cutoff.isoformat()} in {result.batches} batches, and "
            f"{result.route_calls} records of route calls"
        )
