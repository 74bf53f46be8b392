"""The tick pipeline: loop, race, wake-up, decisions, acquire, runner, lease, releases, outbox."""
