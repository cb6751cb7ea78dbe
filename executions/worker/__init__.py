"""The worker: scheduler, runtimes, runner, remote runtime and endpoint, configuration, metrics."""
