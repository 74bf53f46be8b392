"""Operating a fleet from any process: the operator client, the Schedules API, the fleet view."""
