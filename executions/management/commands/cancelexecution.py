import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from executions.queue.cancel import execution_cancel
from orquestador.errors import CodedError


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name in the environment or the password database
        return "unknown"


class Command(BaseCommand):
    help = "Cancel an execution durably, recording the reason in the audit trail."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("execution_id", metavar="ID", help="the execution's id")
        parser.add_argument("--reason", required=True, help="why it is cancelled (required)")

    def handle(self, *args: Any, execution_id: str, reason: str, **options: Any) -> None:
        try:
            result = execution_cancel(
                execution_id=execution_id, actor=f"command:{_os_user()}", reason=reason
            )
        except CodedError as exc:
            raise CommandError(f"{execution_id}: {exc.code}: {exc.detail}") from exc
        self.stdout.write(f"{result.execution_id} {result.status}")
