-- release.lua: end a run; hand the lease straight on to a queued or continued tick.
--
-- KEYS[1] lease    hash {owner, fence, tick, started_ms}
-- KEYS[2] fence    integer counter
-- KEYS[3] pending  the one queued tick (queue_one)
-- KEYS[4] state    hash {run_fence, run_tick, run_owner, ...}
-- ARGV[1] fence    the fence being released
-- ARGV[2] owner    "<node_id>:<nonce>", the owner of a handed-on run
-- ARGV[3] lease_ttl_ms
-- KEYS[5] runs     the job's history stream
-- ARGV[4] continue_tick  0, or a catch-up tick the caller runs next under the same lease
-- ARGV[5] record   the finished run's record (orjson), or "" for none
-- ARGV[6] history  approximate MAXLEN of the history stream
--
-- Reply: {decision, fence, tick, warnings}
--   decision: released | run (the caller runs `tick` with the new `fence`) | not_owner
--   The record is appended only when the fence matched: a retried release whose first
--   attempt ran answers not_owner and appends nothing, so the record is written once.

local held = redis.call('HGET', KEYS[1], 'fence')
if held ~= ARGV[1] then
  return {'not_owner', 0, 0, ''}
end
if ARGV[5] ~= '' then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[6], '*', 'r', ARGV[5])
end

local next_tick = tonumber(ARGV[4])
if next_tick == 0 then
  local waiting = redis.call('GET', KEYS[3])
  if waiting then
    redis.call('DEL', KEYS[3])
    if is_int(waiting) then
      next_tick = tonumber(waiting)
    else
      warn('pending')
    end
  end
end

if next_tick ~= 0 then
  local fence = next_fence(KEYS[2], KEYS[1])
  grant(KEYS[1], KEYS[4], ARGV[2], fence, next_tick, tonumber(ARGV[3]))
  return {'run', fence, next_tick, table.concat(warnings, ',')}
end

redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[4], 'run_fence', 'run_tick', 'run_owner')
return {'released', 0, 0, table.concat(warnings, ',')}
