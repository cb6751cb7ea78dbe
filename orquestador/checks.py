"""System checks: `manage.py check --database default` refuses an unrestricted runtime role."""

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.db import connections

from .dbroles import restricted_role_message, unrestricted_reasons


@register(Tags.database)
def check_runtime_role(databases: Sequence[str] | None = None, **kwargs: Any) -> list[Error]:
    if not databases or "default" not in databases or settings.USING_MIGRATION_ROLE:
        return []
    reasons = unrestricted_reasons(connection=connections["default"])
    if not reasons:
        return []
    return [Error(restricted_role_message(reasons), id="orquestador.E001")]
