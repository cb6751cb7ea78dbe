"""The REST API (docs/api.md): requests, transitions, executions and, for admins, flows."""
