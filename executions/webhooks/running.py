"""The delivery loop inside `runworker`: started beside the scheduler on its event loop, woken
after each run the scheduler ends and by the announcements its listening connection hears,
stopped (in-flight attempts given a grace period) when the scheduler returns."""

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ..worker.runtime import LocalWorkerRuntime
from ..worker.scheduler import Scheduler
from .config import webhook_config
from .delivery import WebhookDeliverer

BORROW_TIMEOUT_SECONDS = 5.0  # seconds


@contextlib.asynccontextmanager
async def webhook_delivery(
    *, runtime: LocalWorkerRuntime, scheduler: Scheduler
) -> AsyncIterator[WebhookDeliverer]:
    deliverer = WebhookDeliverer(
        # The runs' own writes come first: a statement here waits for a shared connection at
        # most this long, then is tried again later.
        borrow=lambda: runtime.borrow(timeout=BORROW_TIMEOUT_SECONDS),
        config=webhook_config(),
    )
    scheduler.after_run = deliverer.poke
    scheduler.webhooks_notified = deliverer.notified
    task = asyncio.get_running_loop().create_task(deliverer.run(), name="webhook-delivery")
    try:
        yield deliverer
    finally:
        deliverer.stop()
        await task
