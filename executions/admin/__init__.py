"""The executions app's admin: read-only pages for flows, requests, executions, checkpoints and
the audit trail (records.py), and the webhook subscriptions and deliveries (webhooks.py).

Importing both here is Django's own registration: admin.autodiscover imports this package.
"""

from . import records, webhooks  # noqa: F401 (registers the model admins)
