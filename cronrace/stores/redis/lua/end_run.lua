-- end_run.lua: a run's end (protocol.release): its record, then the lease handed on to the
-- grant's next tick (catch-up all) or the queued one, or released.
--
-- KEYS[1] lease    hash {owner, fence, ticks, trigger, started_ms[, held, reasserted]}, PX
-- KEYS[2] fence    integer counter
-- KEYS[3] pending  the one tick waiting under queue_one
-- KEYS[4] state    hash {run_owner, run_fence, run_ticks, run_trigger, pending_trigger, ...}
-- KEYS[5] runs     the job's history stream
-- KEYS[6] hold     present while new grants must wait (see decide.lua)
-- ARGV[1] fence    the run's fence
-- ARGV[2] owner    "<node_id>:<nonce>", the owner of a handed-on run
-- ARGV[3] lease_ttl_ms
-- ARGV[4] record   the run's record (RunRecord JSON), '' for none
-- ARGV[5] history  approximate MAXLEN of the history stream
-- ARGV[6] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
-- ARGV[7] hand_on  '1': run the next tick; '0': the caller stops (recorded cancelled)
-- ARGV[8] job      the job's name, written in the records of cancelled ticks
--
-- Reply: {decision, fence, tick, trigger, hold_ms, warnings, record...}
--   decision: released | run (the caller runs `tick` with the new `fence`) | not_owner
--   records: the RunRecord JSON appended, in order. Only the holder of the fence writes:
--   the lease's, or once the lease ran out, the run's (state.run_fence) until a decision
--   records it abandoned. A retry whose first attempt went through answers not_owner,
--   writing nothing.

local lease_key, fence_key, pending_key = KEYS[1], KEYS[2], KEYS[3]
local state_key, runs_key, hold_key = KEYS[4], KEYS[5], KEYS[6]
local owner, ttl_ms, history = ARGV[2], tonumber(ARGV[3]), ARGV[5]
quarantine_prefix = ARGV[6]
local hand_on, job = ARGV[7] == '1', ARGV[8]

check_lease(lease_key)
check_int(fence_key, 'fence')
check_int(pending_key, 'pending')
check(state_key, 'hash', 'state')
check(runs_key, 'stream', 'runs')
check(hold_key, 'string', 'hold')

local function reply(decision, fence, tick, trigger, hold_ms, records)
  local out = {decision, fence, tick, trigger or '', hold_ms, table.concat(warnings, ',')}
  for _, r in ipairs(records) do
    redis.call('XADD', runs_key, 'MAXLEN', '~', history, '*', 'r', r)
    out[#out + 1] = r
  end
  return out
end

local lease = redis.call('HMGET', lease_key, 'fence', 'ticks')
if not lease[1] then
  -- The lease ran out: the run may still end itself until a decision records it abandoned.
  lease = redis.call('HMGET', state_key, 'run_fence', 'run_ticks')
end
if tonumber(lease[1]) ~= tonumber(ARGV[1]) then
  return reply('not_owner', 0, 0, nil, 0, {})
end
local records = {}
if ARGV[4] ~= '' then records[1] = ARGV[4] end
local rest = {}
for t in string.gmatch(lease[2] or '', '%S+') do rest[#rest + 1] = t end
table.remove(rest, 1)
local waiting = redis.call('GET', pending_key)
local waiting_trigger = redis.call('HGET', state_key, 'pending_trigger')

if hand_on and (#rest > 0 or waiting) then
  local ticks, trigger = table.concat(rest, ' '), nil
  if #rest == 0 then
    ticks, trigger = waiting, waiting_trigger
    redis.call('DEL', pending_key)
    redis.call('HDEL', state_key, 'pending_trigger')
  end
  local fence = next_fence(fence_key, lease_key, 0)
  local hold_ms = hold_left_ms(hold_key)
  grant_lease(lease_key, state_key, owner, fence, ticks, trigger, hold_ms > 0, ttl_ms)
  return reply('run', fence, tonumber(string.match(ticks, '%S+')), trigger, hold_ms, records)
end

if not hand_on then
  -- The caller stops: what the grant still had to run, and the queued tick, are cancelled.
  local node, now = string.match(owner, '^[^:]*'), now_ms()
  local function cancelled(tick, fence, trigger)
    records[#records + 1] = run_record(job, tonumber(tick), node, 'cancelled', fence, trigger,
      1, 0, now)
  end
  for _, t in ipairs(rest) do cancelled(t, tonumber(lease[1])) end
  if waiting then
    cancelled(waiting, 0, waiting_trigger)
    redis.call('DEL', pending_key)
    redis.call('HDEL', state_key, 'pending_trigger')
  end
end
redis.call('DEL', lease_key)
redis.call('HDEL', state_key, 'run_owner', 'run_fence', 'run_ticks', 'run_trigger')
return reply('released', 0, 0, nil, 0, records)
