-- renew.lua: extend a running lease, only for the holder of its fence; after a wipe, write
-- back the lease Redis lost while its run went on (re-assert it).
--
-- KEYS[1] lease  hash {owner, fence, tick, started_ms[, held, reasserted]}
-- KEYS[2] hold   present while new runs must wait (see acquire.lua)
-- KEYS[3] fence  the job's fence counter
-- KEYS[4] state  hash {run_fence, run_tick, run_owner, ...}: a re-asserted run is the
--                job's run again (should its lease expire unreleased, the next grant
--                reports it abandoned, as acquire.lua does any run's)
-- ARGV[1] fence  the fence the caller was granted
-- ARGV[2] lease_ttl_ms
-- ARGV[3] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
-- ARGV[4] owner  "<node_id>:<nonce>" of the run: the lease may be re-asserted ('' never)
-- ARGV[5] tick   the run's tick (written in a re-asserted lease)
-- ARGV[6] starting  '1' when a held run is about to start its handler: its grant is no
--                   longer one a re-asserted older run may take the lease from
--
-- A lease is re-asserted when Redis lost the job's data under a live run: the lease is gone
-- and so is the fence counter (nothing was granted since the wipe: every grant seeds it),
-- or the wipe hold is on (a grant since the wipe waits, unstarted). A grant made during the
-- hold ("held" in its lease) has not started its handler: a re-asserting run, alive since
-- before the wipe, takes the lease from it, and that grant must not start (its renewal
-- answers -1). The counter is seeded at or above the re-asserted fence, so fences still
-- only rise, and a later decision meets a live lease, not a wipe.
--
-- Reply: {answer, warnings}
--   answer: 1 renewed; 2 re-asserted (the lease was lost with the job's data and is back);
--     0 the lease is gone (expired, released, or garbage moved aside); -1 another fence
--     holds it (replaced, or taken back by a re-asserted older run). 0 and -1 mean the
--     caller must stop its run.
--   warnings: keys moved aside, "kind|key|moved_to" items (see _lib.lua)

local lease_key, hold_key, fence_key, state_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fence, ttl_ms = ARGV[1], tonumber(ARGV[2])
quarantine_prefix = ARGV[3]
local owner, tick, starting = ARGV[4] or '', ARGV[5] or '0', ARGV[6] == '1'
check(hold_key, 'string', 'hold')
local garbled = check_lease(lease_key)
if garbled then
  -- The caller stops its run at once; a grant made before it has may not start yet.
  start_hold(hold_key, ttl_ms)
end
local counter_garbled = check_int(fence_key, 'fence')

local held = redis.call('HGET', lease_key, 'fence')
if held == fence then
  if starting then redis.call('HDEL', lease_key, 'held') end
  redis.call('PEXPIRE', lease_key, ttl_ms)
  return {1, table.concat(warnings, ',')}
end

local wiped = redis.call('EXISTS', fence_key) == 0 and not counter_garbled
local holding = hold_left_ms(hold_key) > 0
local unstarted = held and holding and redis.call('HGET', lease_key, 'held') == '1'
if owner ~= '' and not garbled and ((not held and (wiped or holding)) or unstarted) then
  redis.call('DEL', lease_key)
  redis.call('HSET', lease_key, 'owner', owner, 'fence', fence, 'tick', tick,
    'started_ms', now_ms(), 'reasserted', 1)
  redis.call('PEXPIRE', lease_key, ttl_ms)
  check(state_key, 'hash', 'state')
  redis.call('HSET', state_key, 'run_fence', fence, 'run_tick', tick, 'run_owner', owner)
  local counter = tonumber(redis.call('GET', fence_key) or '0')
  if counter < tonumber(fence) then
    redis.call('SET', fence_key, int_text(math.max(tonumber(fence), now_us())))
  end
  return {2, table.concat(warnings, ',')}
end
if not held then
  return {0, table.concat(warnings, ',')}
end
return {-1, table.concat(warnings, ',')}
