-- fenced_set.lua: write a value unless a newer fence has already written it.
--
-- KEYS[1] target        the key to write (a string)
-- KEYS[2] target_fence  the highest fence that wrote it (give both one hash tag on Cluster)
-- ARGV[1] fence         the writer's fence
-- ARGV[2] value
-- ARGV[3] ttl_ms        0 for no expiry
--
-- Reply: {written, warnings}
--   written: 1 written; 0 refused (a higher fence wrote before).
--   warnings: keys moved aside, "kind|key|moved_to" items (see _lib.lua): a target that
--     is not a string, or a fence key that is not an integer, is renamed to
--     "<key>:quarantine:<TIME us>" (same hash tag) rather than overwritten or failed on.

check(KEYS[1], 'string', 'target')
check_int(KEYS[2], 'target_fence')

local fence = tonumber(ARGV[1])
local seen = tonumber(redis.call('GET', KEYS[2]))
if seen and seen > fence then
  return {0, table.concat(warnings, ',')}
end
local ttl_ms = tonumber(ARGV[3])
if ttl_ms > 0 then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl_ms)
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl_ms)
else
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[2], ARGV[1])
end
return {1, table.concat(warnings, ',')}
