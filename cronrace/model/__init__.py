"""Pure values and rules: policies, run records, a job's definition and context."""
