-- _lib.lua: helpers prepended by store/commands.py to every script (not a script itself).
--
-- Garbage. A key of ours holding the wrong type would fail every call with WRONGTYPE, and
-- Redis does not roll back a script's earlier writes when it errors. So every script checks
-- all its keys BEFORE its first write (`check`, `check_int`, `check_lease`) and moves a bad
-- key aside with `quarantine`: renamed to `<quarantine_prefix>:<kind>:<TIME us>` (the
-- prefix carries the job's `{<job>}` hash tag, so the key stays in the script's Cluster
-- slot), kept QUARANTINE_TTL_MS for inspection. Each move is reported in the reply's
-- `warnings` string: items `kind|key|moved_to`, comma-separated; the store logs them at
-- ERROR. A script sets `quarantine_prefix` before checking; '' means "next to the key"
-- (`<key>:quarantine:<TIME us>`, for keys that are not ours to name, e.g. fenced_set's).
--
-- Fences must never be reused, even when Redis lost the counter: a missing counter is
-- seeded from the server clock in MICROseconds, which has moved on by more than the
-- number of grants made since (fewer than one grant per microsecond per job). Milliseconds
-- were not enough: a grant, a wipe and a new grant fit in one millisecond (a test caught
-- it). Microseconds since 1970 stay below 2^53, exact in Lua's doubles, until 2255.
-- A counter that is present but behind is the same danger: replication is asynchronous,
-- so a promoted replica may lack the last grants. Every new fence is therefore also at
-- least the server's TIME in microseconds (the counter still counts with INCR): a fence
-- handed out after a failover is above every fence handed out before it, as long as the
-- servers' clocks agree within the time the failover took (seconds, against NTP's ms).

if redis.replicate_commands then pcall(redis.replicate_commands) end

local QUARANTINE_TTL_MS = 7 * 24 * 3600 * 1000
local quarantine_prefix = ''

local function is_int(raw)
  return type(raw) == 'string' and string.match(raw, '^%-?%d+$') ~= nil
end

-- Integers are formatted with %d: tostring() and table.concat() keep 14 digits only.
local function int_text(n)
  return string.format('%d', n)
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

local warnings = {}

local function key_type(key)
  return redis.call('TYPE', key).ok
end

local function quarantine(key, kind)
  local base
  if quarantine_prefix ~= '' then
    base = quarantine_prefix .. ':' .. kind .. ':' .. int_text(now_us())
  else
    base = key .. ':quarantine:' .. int_text(now_us())
  end
  local name, n = base, 0
  while redis.call('EXISTS', name) == 1 do
    n = n + 1
    name = base .. '.' .. n
  end
  redis.call('RENAME', key, name)
  redis.call('PEXPIRE', name, QUARANTINE_TTL_MS)
  warnings[#warnings + 1] = kind .. '|' .. key .. '|' .. name
end

-- The key is absent or of type `want` afterwards.
local function check(key, want, kind)
  local found = key_type(key)
  if found ~= 'none' and found ~= want then
    quarantine(key, kind)
  end
end

-- The key is absent or a string holding an integer afterwards; true when it was moved.
local function check_int(key, kind)
  local found = key_type(key)
  if found == 'none' then return false end
  if found ~= 'string' or not is_int(redis.call('GET', key)) then
    quarantine(key, kind)
    return true
  end
  return false
end

-- The lease is absent or a hash whose fence is an integer afterwards. Returns true when
-- garbage was moved aside: a run may have held that lease, and nobody can tell.
local function check_lease(key)
  local found = key_type(key)
  if found == 'none' then return false end
  if found ~= 'hash' or not is_int(redis.call('HGET', key, 'fence')) then
    quarantine(key, 'lease')
    return true
  end
  return false
end

-- A new fence: at least the server's TIME in microseconds, and strictly above every fence
-- the job's counter has had and above `known`, the highest fence the caller has seen for
-- it (0 when none). Also returns whether Redis was
-- found to have lost this job's counter: missing although the caller knows a fence
-- (`known` > 0), or below a fence the caller has seen (a lossy failover). A brand-new job
-- has neither, so its first grant is never held.
local function next_fence(fence_key, lease_key, known)
  local raw = redis.call('GET', fence_key)
  local lost = false
  if not raw then
    lost = known > 0
    local seed = now_us()
    local held = redis.call('HGET', lease_key, 'fence')
    if is_int(held) and tonumber(held) > seed then seed = tonumber(held) end
    if known > seed then seed = known end
    redis.call('SET', fence_key, int_text(seed))
  elseif tonumber(raw) < known then
    lost = true
    redis.call('SET', fence_key, int_text(known))
  end
  -- A replica promoted while a few writes behind holds an older counter that no node may
  -- know to be old: the server clock (microseconds) is the floor that keeps such a
  -- counter from handing out a fence again (docs/design.md section 11).
  local floor = now_us()
  if tonumber(redis.call('GET', fence_key)) < floor then
    redis.call('SET', fence_key, int_text(floor))
  end
  return redis.call('INCR', fence_key), lost
end

-- How long new runs of the job must still wait (ms, 0 when none): after Redis lost the
-- job's data, runs started before may still be alive for up to one lease_ttl.
local function hold_left_ms(hold_key)
  local left = redis.call('PTTL', hold_key)
  if left > 0 then return left end
  return 0
end

-- The highest fence handed out so far, as far as the store and the caller can tell: the
-- counter, the lease's fence, the caller's, the clock's floor (keys already checked).
local function fence_floor(fence_key, lease_key, known)
  local floor = math.max(now_us(), known or 0)
  local counter = redis.call('GET', fence_key)
  if is_int(counter) and tonumber(counter) > floor then floor = tonumber(counter) end
  local held = redis.call('HGET', lease_key, 'fence')
  if is_int(held) and tonumber(held) > floor then floor = tonumber(held) end
  return floor
end

-- Hold new grants ttl_ms from now (never shorter). The hold key's value is the highest
-- fence a run granted before the loss can hold (before_fence): such a run may write its
-- lost lease back during the hold; a grant made since (a fence above it) may not.
local function start_hold(hold_key, ttl_ms, before_fence)
  local left = hold_left_ms(hold_key)
  if left > 0 then
    local kept = tonumber(redis.call('GET', hold_key) or '') or 0
    if kept > before_fence then before_fence = kept end
  end
  if left >= ttl_ms then
    redis.call('SET', hold_key, int_text(before_fence), 'KEEPTTL')
  else
    redis.call('SET', hold_key, int_text(before_fence), 'PX', ttl_ms)
  end
end

-- Write a grant's lease (its ticks, the current first; its trigger; held: granted during a
-- wipe hold, not started) and mirror its run in the state hash, kept past the lease's
-- expiry so that the next decision can record it abandoned.
local function grant_lease(lease_key, state_key, owner, fence, ticks, trigger, held, ttl_ms)
  redis.call('DEL', lease_key)
  redis.call('HSET', lease_key, 'owner', owner, 'fence', int_text(fence), 'ticks', ticks,
    'started_ms', now_ms())
  if trigger then redis.call('HSET', lease_key, 'trigger', trigger) end
  if held then redis.call('HSET', lease_key, 'held', 1) end
  redis.call('PEXPIRE', lease_key, ttl_ms)
  redis.call('HSET', state_key, 'run_owner', owner, 'run_fence', int_text(fence),
    'run_ticks', ticks)
  if trigger then
    redis.call('HSET', state_key, 'run_trigger', trigger)
  else
    redis.call('HDEL', state_key, 'run_trigger')
  end
end

-- A JSON string, or null for nil / ''. Control characters, quotes and backslashes are
-- escaped (job names and node ids never hold them; a trigger id comes from outside).
local function json_text(s)
  if not s or s == '' then return 'null' end
  return '"' .. string.gsub(s, '[%c"\\]', function(c)
    return string.format('\\u%04x', string.byte(c)) end) .. '"'
end

-- A run record (cronrace/model/records.py, RunRecord: exactly its keys) written by a
-- script: a decision's, or a cancelled tick's. Integers are formatted with %d: cjson
-- keeps 14 significant digits, and a fence has 16.
local function run_record(job, tick, node, outcome, fence, trigger, count, last_tick, now)
  return string.format('{"job":%s,"tick_s":%d,"node":%s,"outcome":"%s","fence":%d,'
    .. '"started_ms":0,"finished_ms":%d,"error":null,"count":%d,"trigger_id":%s,'
    .. '"detail":null,"last_tick_s":%d}', json_text(job), tick, json_text(node), outcome,
    fence or 0, now, count or 1, json_text(trigger), last_tick or 0)
end
