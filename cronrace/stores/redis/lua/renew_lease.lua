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
-- ARGV[7] trigger  the manual trigger the run runs ('' for a tick), kept in a re-asserted lease
-- ARGV[8] job      the job's name, written in the records of a displaced grant
-- ARGV[9] history  approximate MAXLEN of the history stream
-- KEYS[5] runs   the job's history stream: the grant a re-asserted lease displaces gets its
--                result there (lease_lost when its lease was live, abandoned when it had run
--                out), as a decision's sweep or replace would write it
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
local trigger, job, history = ARGV[7] or '', ARGV[8] or '', ARGV[9] or '1000'
local runs_key = KEYS[5]
check(hold_key, 'string', 'hold')
check(state_key, 'hash', 'state')
if runs_key then check(runs_key, 'stream', 'runs') end
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
  -- The grant it displaces (not its own) gets its result, as a decision's would.
  local run = redis.call('HMGET', state_key, 'run_owner', 'run_fence', 'run_ticks', 'run_trigger')
  if runs_key and run[2] and tonumber(run[2]) ~= fence then
    local outcome = held and 'lease_lost' or 'abandoned'
    local who, now = string.match(run[1] or '', '^[^:]*'), now_ms()
    for t in string.gmatch(run[3] or '', '%S+') do
      local trig = run[4] ~= false and run[4] or nil
      redis.call('XADD', runs_key, 'MAXLEN', '~', history, '*', 'r',
        run_record(job, tonumber(t), who, outcome, tonumber(run[2]), trig, 1, 0, now))
    end
    if outcome == 'abandoned' then redis.call('HINCRBY', state_key, 'abandoned', 1) end
  end
  redis.call('DEL', lease_key)
  redis.call('HSET', lease_key, 'owner', owner, 'fence', ARGV[1], 'ticks', tick,
    'started_ms', now_ms(), 'reasserted', 1)
  redis.call('PEXPIRE', lease_key, ttl_ms)
  redis.call('HSET', state_key, 'run_owner', owner, 'run_fence', ARGV[1], 'run_ticks', tick)
  if trigger ~= '' then
    redis.call('HSET', lease_key, 'trigger', trigger)
    redis.call('HSET', state_key, 'run_trigger', trigger)
  else
    redis.call('HDEL', state_key, 'run_trigger')
  end
  if tonumber(counter or '0') < fence then
    redis.call('SET', fence_key, int_text(math.max(fence, now_us())))
  end
  return {2, table.concat(warnings, ',')}
end
if not held then
  return {0, table.concat(warnings, ',')}
end
return {-1, table.concat(warnings, ',')}
