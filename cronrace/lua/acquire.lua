-- acquire.lua: decide a won tick (or a manual trigger) against the watermark and the lease.
--
-- KEYS[1] lease     hash {owner, fence, tick, started_ms}, PX lease_ttl
-- KEYS[2] fence     integer counter, seeded from TIME ms when missing
-- KEYS[3] last      watermark: the newest decided tick
-- KEYS[4] pending   the one queued tick (queue_one)
-- KEYS[5] state     hash {paused, run_fence, run_tick, run_owner, counters}
-- ARGV[1] decide_tick  refused as stale when <= watermark (ignored for triggers)
-- ARGV[2] mark_tick    the watermark to set (>= decide_tick)
-- ARGV[3] run_tick     the tick the run is for (written in the lease)
-- ARGV[4] owner        "<node_id>:<nonce>"
-- ARGV[5] lease_ttl_ms
-- ARGV[6] overlap      skip | queue_one | replace | allow
-- ARGV[7] mode         run | mark (decide, run nothing) | trigger (leave the watermark alone)
--
-- Reply: {decision, fence, prev_watermark, holder_fence, holder_owner,
--         abandoned_tick, abandoned_fence, abandoned_owner, warnings, superseded_tick}
--   decision: run | stale | marked | skipped:paused | skipped:overlap | queued
--   prev_watermark: -1 when there was none; holder_*: the live lease met (0 / "")
--   abandoned_*: a run whose lease expired without release (0 / "")
--   warnings: comma-separated names of keys that held garbage and were repaired
--   superseded_tick: a queued tick dropped by this decision (0 when none)

local decide_tick = tonumber(ARGV[1])
local mark_tick = tonumber(ARGV[2])
local run_tick = tonumber(ARGV[3])
local owner = ARGV[4]
local ttl_ms = tonumber(ARGV[5])
local overlap = ARGV[6]
local mode = ARGV[7]

local prev = -1
local holder_fence, holder_owner = 0, ''
local ab_tick, ab_fence, ab_owner = 0, 0, ''
local superseded = 0

local function reply(decision, fence)
  return {decision, fence, prev, holder_fence, holder_owner, ab_tick, ab_fence, ab_owner,
    table.concat(warnings, ','), superseded}
end

if mode ~= 'trigger' then
  local raw = redis.call('GET', KEYS[3])
  if is_int(raw) then
    prev = tonumber(raw)
  elseif raw then
    warn('watermark')
  end
  if prev >= decide_tick then
    return reply('stale', 0)
  end
  redis.call('SET', KEYS[3], string.format('%d', mark_tick))
  if mode == 'mark' then
    return reply('marked', 0)
  end
end

if redis.call('HGET', KEYS[5], 'paused') == '1' then
  redis.call('HINCRBY', KEYS[5], 'skipped_paused', 1)
  return reply('skipped:paused', 0)
end

local lease = redis.call('HMGET', KEYS[1], 'owner', 'fence')
local alive = false
if lease[2] then
  if is_int(lease[2]) then
    alive = true
    holder_fence = tonumber(lease[2])
    holder_owner = lease[1] or ''
  else
    warn('lease')
    redis.call('DEL', KEYS[1])
  end
end

if not alive then
  local run = redis.call('HMGET', KEYS[5], 'run_fence', 'run_tick', 'run_owner')
  if run[1] then
    ab_fence = tonumber(run[1]) or 0
    ab_tick = tonumber(run[2]) or 0
    ab_owner = run[3] or ''
    redis.call('HDEL', KEYS[5], 'run_fence', 'run_tick', 'run_owner')
    redis.call('HINCRBY', KEYS[5], 'abandoned', 1)
  end
  -- A tick queued behind a run that died is older than this one: this one supersedes it.
  local waiting = redis.call('GET', KEYS[4])
  if waiting then
    superseded = tonumber(waiting) or 0
    redis.call('DEL', KEYS[4])
  end
end

if overlap == 'allow' then
  return reply('run', next_fence(KEYS[2], KEYS[1]))
end

if alive then
  if overlap == 'queue_one' then
    local waiting = redis.call('GET', KEYS[4])
    if waiting then superseded = tonumber(waiting) or 0 end
    redis.call('SET', KEYS[4], string.format('%d', run_tick))
    redis.call('HINCRBY', KEYS[5], 'queued', 1)
    return reply('queued', 0)
  elseif overlap ~= 'replace' then
    redis.call('HINCRBY', KEYS[5], 'skipped_overlap', 1)
    return reply('skipped:overlap', 0)
  end
end

local fence = next_fence(KEYS[2], KEYS[1])
grant(KEYS[1], KEYS[5], owner, fence, run_tick, ttl_ms)
return reply('run', fence)
