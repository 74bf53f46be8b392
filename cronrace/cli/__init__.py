"""The cronrace command: one module per command group."""
