"""The fleet: heartbeat, membership, racers, and the definitions each node runs."""
