-- release.lua: end a run; hand the lease straight on to a queued or continued tick.
--
-- KEYS[1] lease    hash {owner, fence, tick, started_ms}
-- KEYS[2] fence    integer counter
-- KEYS[3] pending  the one queued tick (queue_one)
-- KEYS[4] state    hash {run_fence, run_tick, run_owner, ...}
-- KEYS[5] runs     the job's history stream
-- KEYS[6] hold     present while new runs must wait (see acquire.lua)
-- ARGV[1] fence    the fence being released
-- ARGV[2] owner    "<node_id>:<nonce>", the owner of a handed-on run
-- ARGV[3] lease_ttl_ms
-- ARGV[4] continue_tick  0, or a catch-up tick the caller runs next under the same lease
-- ARGV[5] record   the finished run's record (orjson), or "" for none
-- ARGV[6] history  approximate MAXLEN of the history stream
-- ARGV[7] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
--
-- Reply: {decision, fence, tick, warnings, hold_ms, trigger}
--   decision: released | run (the caller runs `tick` with the new `fence`) | not_owner
--   warnings: keys moved aside, "kind|key|moved_to" items (see _lib.lua)
--   hold_ms: the handed-on run must wait this long before its handler starts
--   trigger: the manual trigger id when the handed-on tick is a queued trigger ('')
--   The record is appended only when the fence matched: a retried release whose first
--   attempt ran answers not_owner and appends nothing, so the record is written once.

local lease_key, fence_key, pending_key = KEYS[1], KEYS[2], KEYS[3]
local state_key, runs_key, hold_key = KEYS[4], KEYS[5], KEYS[6]
quarantine_prefix = ARGV[7]

check_lease(lease_key)
check_int(fence_key, 'fence')
check_int(pending_key, 'pending')
check(state_key, 'hash', 'state')
check(runs_key, 'stream', 'runs')
check(hold_key, 'string', 'hold')

local held = redis.call('HGET', lease_key, 'fence')
if held ~= ARGV[1] then
  return {'not_owner', 0, 0, table.concat(warnings, ','), 0, ''}
end
if ARGV[5] ~= '' then
  redis.call('XADD', runs_key, 'MAXLEN', '~', ARGV[6], '*', 'r', ARGV[5])
end

local next_tick = tonumber(ARGV[4])
local trigger = ''
if next_tick == 0 then
  local waiting = redis.call('GET', pending_key)
  if waiting then
    redis.call('DEL', pending_key)
    next_tick = tonumber(waiting)
    trigger = redis.call('HGET', state_key, 'pending_trigger') or ''
    redis.call('HDEL', state_key, 'pending_trigger')
  end
end

if next_tick ~= 0 then
  local fence = next_fence(fence_key, lease_key, 0)
  grant(lease_key, state_key, ARGV[2], fence, next_tick, tonumber(ARGV[3]))
  local hold_ms = hold_left_ms(hold_key)
  if hold_ms > 0 then
    redis.call('HSET', lease_key, 'held', 1)  -- unstarted until its hold ends (renew.lua)
  end
  return {'run', fence, next_tick, table.concat(warnings, ','), hold_ms, trigger}
end

redis.call('DEL', lease_key)
redis.call('HDEL', state_key, 'run_fence', 'run_tick', 'run_owner')
return {'released', 0, 0, table.concat(warnings, ','), 0, ''}
