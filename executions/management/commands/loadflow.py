from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from executions.flows.publication import (
    FlowConflict,
    FlowInvalid,
    definition_from_json,
    flow_publish,
)


class Command(BaseCommand):
    help = (
        "Publish the flow version in each JSON file, in order; identical content is a no-op. "
        "The first file refused stops the command."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # Several in one process: scripts/start publishes every example without a Django start
        # per file.
        parser.add_argument("files", nargs="+", metavar="file", help="a flow definition, as JSON")

    def handle(self, *args: Any, files: list[str], **options: Any) -> None:
        for file in files:
            self._publish(file)

    def _publish(self, file: str) -> None:
        try:
            text = Path(file).read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {file}: {exc.strerror or exc}") from exc
        try:
            flow, created = flow_publish(definition=definition_from_json(text))
        except FlowInvalid as exc:
            lines = "\n".join(f"  {problem}" for problem in exc.problems)
            raise CommandError(f"{file}: invalid flow definition:\n{lines}") from exc
        except FlowConflict as exc:
            raise CommandError(f"{file}: {exc.detail}") from exc
        self.stdout.write(f"{'published' if created else 'unchanged'} {flow}")
