-- quarantine.lua: move a key aside when it does not hold the type a command needs.
--
-- Used by the store before repeating a pipelined command that failed with WRONGTYPE
-- (a run record's XADD, a state HSET): the scripts check their own keys.
--
-- KEYS[1] key
-- ARGV[1] type        the type the key must have: string | hash | stream | ...
-- ARGV[2] kind        the key's role, for the report (runs, state, ...)
-- ARGV[3] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
--
-- Reply: warnings, "kind|key|moved_to" (see _lib.lua), '' when the key was fine.

quarantine_prefix = ARGV[3]
check(KEYS[1], ARGV[1], ARGV[2])
return table.concat(warnings, ',')
