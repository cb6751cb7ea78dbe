"""Completion webhooks: per-tenant subscriptions, the outbox the database writes in the same
transaction as each state change it reports, and the delivery loop `runworker` runs
(docs/adr/0020-webhooks-from-an-outbox.md)."""
