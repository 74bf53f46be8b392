"""Pure time math, standard library only: cron fields, zones, schedules (docs/design.md 6)."""
