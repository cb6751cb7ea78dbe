from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from orquestador.dbroles import RoleError, grant_runtime


class Command(BaseCommand):
    help = "Grant the DATABASE_URL role DML on the application's tables, and nothing more."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            statements = grant_runtime(connection=connection, role=settings.RUNTIME_DATABASE_USER)
        except RoleError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"granted runtime role {settings.RUNTIME_DATABASE_USER!r}: {len(statements)} statements"
        )
