-- _lib.lua: helpers prepended by store.py to acquire.lua and release.lua (not a script).
-- Fences must never be reused, even when Redis lost the counter: a missing counter is
-- seeded from the server clock in MICROseconds, which has moved on by more than the
-- number of grants made since (fewer than one grant per microsecond per job). Milliseconds
-- were not enough: a grant, a wipe and a new grant fit in one millisecond (a test caught
-- it). Microseconds since 1970 stay below 2^53, exact in Lua's doubles, until 2255.

if redis.replicate_commands then pcall(redis.replicate_commands) end

local function is_int(raw)
  return type(raw) == 'string' and string.match(raw, '^%-?%d+$') ~= nil
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

local warnings = {}
local function warn(what)
  warnings[#warnings + 1] = what
end

-- fence_key, lease_key -> a new fence, strictly above every fence this job has had.
local function next_fence(fence_key, lease_key)
  local raw = redis.call('GET', fence_key)
  if not is_int(raw) then
    if raw then warn('fence') end
    local seed = now_us()
    local held = redis.call('HGET', lease_key, 'fence')
    if is_int(held) and tonumber(held) > seed then seed = tonumber(held) end
    redis.call('SET', fence_key, string.format('%d', seed))
  end
  return redis.call('INCR', fence_key)
end

-- Write the running lease and remember the run in the state hash, so that a run whose
-- lease expires without a release can be reported as abandoned by the next acquirer.
local function grant(lease_key, state_key, owner, fence, tick, ttl_ms)
  redis.call('DEL', lease_key)
  redis.call('HSET', lease_key, 'owner', owner, 'fence', fence, 'tick', tick,
    'started_ms', now_ms())
  redis.call('PEXPIRE', lease_key, ttl_ms)
  redis.call('HSET', state_key, 'run_fence', fence, 'run_tick', tick, 'run_owner', owner)
end
