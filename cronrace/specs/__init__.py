"""Jobs written as data: TOML job specs, stored schedules, target specs."""
