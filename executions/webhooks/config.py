"""The webhook settings, read once (WEBHOOK_* in orquestador/settings.py), and the delivery
loop's tunables."""

from dataclasses import dataclass

from django.conf import settings

CLAIM_BATCH = 50  # deliveries claimed by one statement at most
CONCURRENCY = 100  # attempts in flight per process at most (each holds a task, no connection)
POLL_SECONDS = 1.0  # seconds: an idle loop claims at least this often (work of other processes)
HOLD_MARGIN_SECONDS = 5.0  # seconds past the timeout a claimed delivery stays held
RETRY_MAX_SECONDS = 3600.0  # seconds: no retry waits longer than this
FAILING_AFTER = 3  # failed attempts in a row after which a subscription shows as `failing`
MAX_SUBSCRIPTIONS = 100  # subscriptions per tenant


@dataclass(frozen=True)
class WebhookConfig:
    allow_http: bool = False
    allow_private_networks: bool = False
    timeout_seconds: float = 10.0
    max_age_seconds: float = 24 * 3600.0
    secret_overlap_seconds: float = 24 * 3600.0
    retry_base_seconds: float = 5.0

    @property
    def hold_seconds(self) -> float:
        """How long a claimed delivery is held before another process may try it again."""
        return self.timeout_seconds + HOLD_MARGIN_SECONDS


def webhook_config() -> WebhookConfig:
    """The configuration the settings give (validated when they loaded)."""
    return WebhookConfig(
        allow_http=settings.WEBHOOK_ALLOW_HTTP,
        allow_private_networks=settings.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
        timeout_seconds=settings.WEBHOOK_TIMEOUT_SECONDS,
        max_age_seconds=settings.WEBHOOK_MAX_AGE_HOURS * 3600.0,
        secret_overlap_seconds=settings.WEBHOOK_SECRET_OVERLAP_HOURS * 3600.0,
        retry_base_seconds=settings.WEBHOOK_RETRY_BASE_SECONDS,
    )
