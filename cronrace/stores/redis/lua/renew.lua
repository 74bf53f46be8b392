-- renew.lua: extend a running lease, only for the holder of its fence.
--
-- KEYS[1] lease  hash {owner, fence, tick, started_ms}
-- KEYS[2] hold   present while new runs must wait (see acquire.lua)
-- ARGV[1] fence  the fence the caller was granted
-- ARGV[2] lease_ttl_ms
-- ARGV[3] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
--
-- Reply: {answer, warnings}
--   answer: 1 renewed; 0 the lease is gone (expired, released, wiped, or garbage moved
--     aside); -1 another fence holds it (replaced). Both 0 and -1 mean the caller must
--     stop its run.
--   warnings: keys moved aside, "kind|key|moved_to" items (see _lib.lua)

quarantine_prefix = ARGV[3]
check(KEYS[2], 'string', 'hold')
if check_lease(KEYS[1]) then
  -- The caller stops its run at once; a grant made before it has may not start yet.
  start_hold(KEYS[2], tonumber(ARGV[2]))
end

local held = redis.call('HGET', KEYS[1], 'fence')
if not held then
  return {0, table.concat(warnings, ',')}
end
if held ~= ARGV[1] then
  return {-1, ''}
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return {1, ''}
