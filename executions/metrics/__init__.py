"""`GET /metrics`: the queue and the route limits as Prometheus gauges, read from the database at
each scrape (docs/operations.md#metrics). A worker's own metrics live in executions/worker/."""
