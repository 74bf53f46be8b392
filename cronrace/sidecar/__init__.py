"""The sidecar: jobs from a TOML file calling HTTP, command and stream targets; PID 1."""
