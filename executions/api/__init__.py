"""The REST API of SPEC §6: requests, transitions, executions and, for admins, flows."""
