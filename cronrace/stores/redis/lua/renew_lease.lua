-- renew_lease.lua: extend a run's lease, only for the holder of its fence; after a wipe,
-- write back the lease the store lost while its run went on (protocol.renew).
--
-- KEYS[1] lease  hash {owner, fence, ticks, trigger, started_ms[, held, reasserted]}, PX
-- KEYS[2] hold   present while new grants must wait (see decide.lua)
-- KEYS[3] fence  the job's fence counter
-- KEYS[4] state  hash {run_owner, run_fence, run_ticks, run_trigger, ...}: a re-asserted
--                run is the job's run again (recorded abandoned should it run out)
-- ARGV[1] fence  the fence the caller was granted
-- ARGV[2] lease_ttl_ms
-- ARGV[3] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
-- ARGV[4] owner  "<node_id>:<nonce>" of the run: the lease may be re-asserted ('' never)
-- ARGV[5] tick   the run's tick (written in a re-asserted lease)
-- ARGV[6] starting  '1' when a held run starts its handler now
--
-- A lease is re-asserted when the store lost it under a live run: no lease and no counter
-- (nothing was granted since the loss: every grant seeds it); or, during the wipe hold, by
-- a run granted before the loss (its fence at most the hold key's value) when there is no
-- lease, or the lease is a held grant (not started), or one re-asserted with a lower fence
-- (the run with the highest fence is the newest grant the store had made). A grant made
-- during the hold never re-asserts. The counter is raised to the re-asserted fence.
--
-- Reply: {answer, warnings}
--   answer: 1 renewed; 2 re-asserted; 0 the lease is gone; -1 another fence holds it
--   warnings: keys moved aside, "kind|key|moved_to" items (see _lib.lua)

local lease_key, hold_key, fence_key, state_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fence, ttl_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
quarantine_prefix = ARGV[3]
local owner, tick, starting = ARGV[4], ARGV[5], ARGV[6] == '1'
check(hold_key, 'string', 'hold')
check(state_key, 'hash', 'state')
-- A garbled counter is no sign of a wipe: it re-asserts nothing.
local counter_garbled = check_int(fence_key, 'fence')
local garbled = check_lease(lease_key)
if garbled then
  -- The caller stops its run at once; a grant made before it has may not start yet.
  start_hold(hold_key, ttl_ms, fence_floor(fence_key, lease_key, 0))
end

local lease = redis.call('HMGET', lease_key, 'fence', 'held', 'reasserted')
local held = tonumber(lease[1])
if held == fence then
  if starting then redis.call('HDEL', lease_key, 'held') end
  redis.call('PEXPIRE', lease_key, ttl_ms)
  return {1, table.concat(warnings, ',')}
end

-- During the hold, only a run granted before the loss (its fence at most the hold's value)
-- writes its lease back: a grant made during the hold never takes it from such a run.
local hold_fence = tonumber(redis.call('GET', hold_key) or '') or 0
local before = hold_left_ms(hold_key) > 0 and fence <= hold_fence
local counter = redis.call('GET', fence_key)
local lost = not held and (before or (not counter and not counter_garbled))
local yields = held and before and (lease[2] == '1' or (lease[3] == '1' and held < fence))
if owner ~= '' and not garbled and (lost or yields) then
  redis.call('DEL', lease_key)
  redis.call('HSET', lease_key, 'owner', owner, 'fence', ARGV[1], 'ticks', tick,
    'started_ms', now_ms(), 'reasserted', 1)
  redis.call('PEXPIRE', lease_key, ttl_ms)
  redis.call('HSET', state_key, 'run_owner', owner, 'run_fence', ARGV[1], 'run_ticks', tick)
  redis.call('HDEL', state_key, 'run_trigger')
  if tonumber(counter or '0') < fence then
    redis.call('SET', fence_key, int_text(math.max(fence, now_us())))
  end
  return {2, table.concat(warnings, ',')}
end
if not held then
  return {0, table.concat(warnings, ',')}
end
return {-1, table.concat(warnings, ',')}
