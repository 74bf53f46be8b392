"""What a running node leans on: clocks, retry, logs, the observer, watchdog, readiness."""
