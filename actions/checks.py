"""System check: `manage.py check` (and runserver) refuse a bad INTEGRATIONS_FILE.

The worker validates the file itself at start (`actions.registry.load_registry`); this check
gives operators the same message before deploying. Migration commands skip it: they run where
the integrations' credentials are not, and never call a provider.
"""

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import Error, register

from orquestador.workerconfig import WorkerConfigError

from .base import IntegrationConfigError

INTEGRATIONS_TAG = "integrations"


@register(INTEGRATIONS_TAG)
def check_integrations_file(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[Error]:
    if settings.USING_MIGRATION_ROLE:
        return []
    from .registry import load_configured_catalog

    try:
        load_configured_catalog()
    except IntegrationConfigError as exc:
        return [
            Error(
                f"INTEGRATIONS_FILE is not valid: {exc}",
                hint="See INTEGRATIONS.md for the format.",
                id="actions.E001",
            )
        ]
    except WorkerConfigError as exc:  # the catalog bounds adapter timeouts by the lease
        return [Error(str(exc), hint="See .env.example.", id="actions.E002")]
    return []
