"""Pure time math, standard library only: cron fields, zones, schedules (DESIGN.md 6)."""
