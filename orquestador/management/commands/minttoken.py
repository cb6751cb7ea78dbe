from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from orquestador.auth import MAX_IDENTITY_LENGTH, token_encode

MAX_TTL_SECONDS = 30 * 24 * 3600  # seconds: local tokens are short-lived by design


class Command(BaseCommand):
    help = "Print an HS256 API token signed with JWT_SECRET, for local use."
    requires_system_checks = []  # signs a token; needs no database

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sub", required=True, help="Subject: the owner of what it creates.")
        parser.add_argument("--tenant", required=True, help="Tenant the caller acts in.")
        parser.add_argument(
            "--scope",
            default="requests:write requests:read",
            help="Space-separated permissions (requests:write, requests:read, "
            "requests:read:tenant, flows:admin). Default: %(default)r.",
        )
        parser.add_argument(
            "--ttl", type=int, default=3600, help="Seconds until it expires (default 3600)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ttl: int = options["ttl"]
        if not 1 <= ttl <= MAX_TTL_SECONDS:
            raise CommandError(f"--ttl must be between 1 and {MAX_TTL_SECONDS} seconds")
        for name in ("sub", "tenant"):
            value = options[name]
            if not value.strip() or len(value) > MAX_IDENTITY_LENGTH or not value.isprintable():
                raise CommandError(
                    f"--{name} must be 1 to {MAX_IDENTITY_LENGTH} printable characters"
                )
        try:
            token = token_encode(
                subject=options["sub"],
                tenant=options["tenant"],
                scope=options["scope"],
                ttl_seconds=ttl,
            )
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(token)
