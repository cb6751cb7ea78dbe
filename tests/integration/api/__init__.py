"""The REST API over HTTP, with real signed tokens, against PostgreSQL."""
