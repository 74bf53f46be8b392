-- acquire.lua: decide a won tick (or a manual trigger) against the watermark and the lease.
--
-- KEYS[1] lease     hash {owner, fence, tick, started_ms}, PX lease_ttl
-- KEYS[2] fence     integer counter, seeded from TIME in microseconds when missing
-- KEYS[3] last      watermark: the newest decided tick
-- KEYS[4] pending   the one queued tick (queue_one)
-- KEYS[5] state     hash {paused, run_fence, run_tick, run_owner, counters}
-- KEYS[6] claim     the won claim: "<owner>", then "<owner>\n<request_id>\n<reply>" once
--                   decided (the claim's TTL kept), so a retry gets the same answer
-- KEYS[7] hold      present while new runs must wait (Redis lost the job's data), PX
-- ARGV[1] decide_tick  refused as stale when <= watermark (ignored for triggers)
-- ARGV[2] mark_tick    the watermark to set (>= decide_tick)
-- ARGV[3] run_tick     the tick the run is for (written in the lease)
-- ARGV[4] owner        "<node_id>:<nonce>"
-- ARGV[5] lease_ttl_ms
-- ARGV[6] overlap      skip | queue_one | replace | allow
-- ARGV[7] mode         run | mark (decide, run nothing) | trigger (leave the watermark alone)
-- ARGV[8] request_id   names this decision for retries ("<mode>:<tick>", "trigger:<id>");
--                      '' when the caller never retries it (nothing is remembered)
-- ARGV[9] known_fence  the highest fence the caller has seen for this job (0: none)
-- ARGV[10] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
-- ARGV[11] trigger_id  the manual trigger decided ('' for a tick): a trigger that has to
--                      wait (queue_one) stays one, as state.pending_trigger
-- KEYS[8] prior_claim  the claim of the tick just before those this decision covers (the
--                      caller's previous tick of the job; any unused claim key when none)
-- ARGV[12] prior_tick  that tick (0: none). Deciding past it while its claim is won but
--                      undecided (its winner's answer is still on the way, or its reply
--                      was lost and is being read back) notes it in state.passed: no one
--                      else will decide it, so its winner still may, late. The ticks
--                      between the watermark and it are noted too (state.passed_ranges):
--                      this caller raced them and left them to their winners
-- ARGV[13] late_ok     '1' (catchup = all): a passed tick decided late runs, under the
--                      overlap policy; otherwise (and always in mode mark) it is answered
--                      'missed'
-- ARGV[14] keep_ms     the answer remembered under the claim is kept at least this long
--                      from now (0: as long as the claim lives): a decision made as its
--                      claim runs out, or after it ran out (its winner frozen past the
--                      claim's lifetime), can still be read back by a retry after a lost
--                      answer. Without it the retry found the tick decided and its answer
--                      gone, and what the answer called for (a missed count, a skipped
--                      record) was written by no one (the scheduler model, racers = 2)
-- ARGV[15] first_tick  the oldest tick the decision covers (its backlog's, fired or
--                      counted missed; 0: run_tick). A passed tick decided late takes its
--                      backlog out of the passed range from there: from run_tick, a run's
--                      backlog under catch-up latest (its one fired tick is its newest)
--                      left its older ticks in the range, run or counted by no one
--
-- Reply: {decision, fence, prev_watermark, holder_fence, holder_owner,
--         abandoned_tick, abandoned_fence, abandoned_owner, warnings, superseded_tick,
--         hold_ms, data_lost, superseded_trigger, late_from, replayed, renewed}
--   decision: run | stale | marked | skipped:paused | skipped:overlap | queued | missed
--     (missed: a won tick passed while its answer was on the way, and late_ok is not set)
--   prev_watermark: -1 when there was none; holder_*: the live lease met (0 / "")
--   abandoned_*: a run whose lease expired without release (0 / "")
--   warnings: keys moved aside, "kind|key|moved_to" items (see _lib.lua)
--   superseded_tick: a queued tick dropped by this decision (0 when none);
--   superseded_trigger: its trigger id when it was a manual trigger ('' otherwise)
--   hold_ms: a granted run must wait this long before its handler starts (0: at once)
--   late_from: a passed tick decided late and run (catchup = all): the oldest tick of
--     its backlog (first_tick up to decide_tick, which its one claim covers) decided with
--     it, taken out of a passed range (the decision that passed them raced them and left
--     them to their claim's holder: this one). Runs cover the ticks from it. 0 otherwise
--   data_lost: 1 when this call found Redis had lost the job's fence counter (and
--     started the hold: one lease_ttl, honoured by every grant, allow and replace too).
--     A lease holding garbage, moved aside, starts the hold too.
--   replayed: 1 when this is the remembered answer of an earlier call with the same
--     owner and request_id (a retry after a lost reply): nothing was decided again
--   renewed: 1 when a replayed run's lease still held its fence and was extended by
--     this call (the run may start now). A replayed run whose lease another fence holds
--     lost it (replayed, not renewed: it must not start). So did one whose fence is below
--     the job's counter or below a fence the caller has seen: a failover to a replica that
--     lagged restored the grant and its lease, but fences above it were handed out on the
--     primary it replaced (the deep model's second finding). A run whose lease is gone
--     is decided again (a fresh answer, a new fence: the first one never ran).
--   A manual trigger already decided (its id among state.triggers, the job's last 16)
--   is answered 'stale': its claim may have run out, and a node paused between reading
--   it and claiming it won the claim anew.
--   A claim that another owner holds now (a live node took it over from this one, whose
--   heartbeat had expired: takeover.lua) is answered 'stale' and decides nothing: its
--   tick is the taker's to decide.
--
-- Every key is checked before the first write: a decision either happens whole or not
-- at all, and never leaves the watermark advanced without a decision.

local lease_key, fence_key, last_key, pending_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local state_key, claim_key, hold_key, prior_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local decide_tick = tonumber(ARGV[1])
local mark_tick = tonumber(ARGV[2])
local run_tick = tonumber(ARGV[3])
local owner = ARGV[4]
local ttl_ms = tonumber(ARGV[5])
local overlap = ARGV[6]
local mode = ARGV[7]
local request_id = ARGV[8]
local known_fence = tonumber(ARGV[9]) or 0
quarantine_prefix = ARGV[10]
local trigger_id = ARGV[11] or ''
local prior_tick = tonumber(ARGV[12]) or 0
local late_ok = ARGV[13] == '1'
local keep_ms = tonumber(ARGV[14]) or 0
local first_tick = tonumber(ARGV[15]) or 0
if first_tick <= 0 or first_tick > run_tick then first_tick = run_tick end

check(hold_key, 'string', 'hold')
if check_lease(lease_key) then
  -- Whether a run held the lease that was garbled is unknown: hold as after a wipe.
  start_hold(hold_key, ttl_ms)
end
-- A garbled counter is re-seeded like a lost one, but it is no sign of lost data (it holds
-- new grants only when no lease guards the job: take_fence).
local fence_garbled = check_int(fence_key, 'fence')
check_int(last_key, 'watermark')
check_int(pending_key, 'pending')
check(state_key, 'hash', 'state')
check(claim_key, 'string', 'claim')
if prior_key then check(prior_key, 'string', 'claim') end

local prev = -1
local holder_fence, holder_owner = 0, ''
local ab_tick, ab_fence, ab_owner = 0, 0, ''
local superseded, superseded_trigger = 0, ''
local hold_ms, data_lost = 0, 0
local late_from = 0

-- A retry of a decision already made (its answer was lost) gets that answer again.
local memo_head = owner .. '\n' .. request_id .. '\n'
local claim = false
local remember = false
-- The claim ran out before this decision: its answer is kept in a claim made anew.
local revive = false
-- A grant of this request whose lease ran out unstarted, decided again.
local redecided = false
if request_id ~= '' then
  claim = redis.call('GET', claim_key)
  remember = claim == owner
  revive = not claim and keep_ms > 0
  if claim and string.sub(claim, 1, #memo_head) == memo_head then
    local memo = {}
    for part in string.gmatch(string.sub(claim, #memo_head + 1) .. '\n', '(.-)\n') do
      memo[#memo + 1] = part
    end
    if #memo < 13 then memo[13] = '' end  -- remembered before superseded_trigger existed
    if #memo < 14 then memo[14] = '0' end  -- remembered before late_from existed
    local held = redis.call('HGET', lease_key, 'fence')
    if memo[1] ~= 'run' or overlap == 'allow' or held then
      -- A granted run whose lease still holds its fence may start now: extend the lease
      -- from now. Held by another fence, it lost its lease before it could start; and so
      -- did a grant that fences above it followed (the counter, or the caller, knows one),
      -- though a lagging failover put its lease back.
      local granted = tonumber(memo[2])
      local newest = math.max(tonumber(redis.call('GET', fence_key) or '0'), known_fence)
      local renewed = 0
      if memo[1] == 'run' and tonumber(held) == granted and newest <= granted then
        redis.call('PEXPIRE', lease_key, ttl_ms)
        renewed = 1
      end
      memo[#memo + 1] = 1
      memo[#memo + 1] = renewed
      return memo
    end
    -- The grant's lease ran out before its answer came back, so its run never started:
    -- decide the tick again, late, under the overlap policy (the watermark already
    -- counts it). The first fence is reported abandoned; this answer replaces the memo.
    mode = 'trigger'
    prev = tonumber(memo[3])
    remember = true
    redecided = true
  elseif claim and string.match(claim, '^[^\n]*') ~= owner then
    -- Another owner holds the claim: a live node took it over (takeover.lua) while this
    -- one was frozen or cut off. The tick is the taker's to decide; deciding it here too
    -- could fire it twice.
    local raw = redis.call('GET', last_key)
    if raw then prev = tonumber(raw) end
    return {'stale', 0, prev, 0, '', 0, 0, '', table.concat(warnings, ','), 0, 0, 0, '', 0, 0, 0}
  end
end

local function reply(decision, fence)
  local out = {decision, fence, prev, holder_fence, holder_owner, ab_tick, ab_fence, ab_owner,
    table.concat(warnings, ','), superseded, hold_ms, data_lost, superseded_trigger, late_from}
  local revived = revive and decision ~= 'stale'
  if remember or revived then
    -- Remember the answer under the claim (its TTL outlives every retry of the tick; kept
    -- keep_ms from now at least, in a claim made anew if it had run out).
    local parts = {}
    for i, v in ipairs(out) do
      if type(v) == 'number' then parts[i] = int_text(v) else parts[i] = v end
    end
    local memo = memo_head .. table.concat(parts, '\n')
    if revived then
      redis.call('SET', claim_key, memo, 'PX', keep_ms)
    else
      redis.call('SET', claim_key, memo, 'KEEPTTL')
      if keep_ms > 0 and redis.call('PTTL', claim_key) < keep_ms then
        redis.call('PEXPIRE', claim_key, keep_ms)
      end
    end
  end
  out[#out + 1] = 0
  out[#out + 1] = 0
  return out
end

local function take_fence()
  -- A garbled counter is no sign of lost data while a lease guards the job; with no lease
  -- held, a wipe may have taken that lease too (garbage landing after it): hold as after
  -- a wipe, since a run started before may still be alive.
  local unguarded = fence_garbled and redis.call('EXISTS', lease_key) == 0
  local fence, lost = next_fence(fence_key, lease_key, known_fence)
  if lost and not fence_garbled then
    data_lost = 1
    start_hold(hold_key, ttl_ms)
  elseif unguarded then
    start_hold(hold_key, ttl_ms)
  end
  hold_ms = hold_left_ms(hold_key)
  return fence
end

-- Ticks passed by a later decision while their won claims were undecided (newest last).
local PASSED_KEPT = 16
local function passed_ticks()
  local out = {}
  for tick in string.gmatch(redis.call('HGET', state_key, 'passed') or '', '%S+') do
    out[#out + 1] = tick
  end
  return out
end

local function save_passed(ticks)
  while #ticks > PASSED_KEPT do table.remove(ticks, 1) end
  if #ticks == 0 then
    redis.call('HDEL', state_key, 'passed')
  else
    redis.call('HSET', state_key, 'passed', table.concat(ticks, ' '))
  end
end

-- Ranges of ticks passed by a later decision: lo < tick <= hi, newest last. A decision
-- whose caller raced ticks up to prior_tick and left them to their winners, while the
-- watermark was still below them, decides none of them: every tick from the watermark to
-- prior_tick is left to whoever holds its claim (several may be on the way at once: a
-- Cluster slot moving between shards holds back every decision of the job for a while,
-- and they come back in any order).
local RANGES_KEPT = 16
local function passed_ranges()
  local out = {}
  local raw = redis.call('HGET', state_key, 'passed_ranges') or ''
  for lo, hi in string.gmatch(raw, '(%-?%d+):(%-?%d+)') do
    out[#out + 1] = {tonumber(lo), tonumber(hi)}
  end
  return out
end

local function save_ranges(ranges)
  while #ranges > RANGES_KEPT do table.remove(ranges, 1) end
  local parts = {}
  for _, r in ipairs(ranges) do
    if r[1] < r[2] then parts[#parts + 1] = int_text(r[1]) .. ':' .. int_text(r[2]) end
  end
  if #parts == 0 then
    redis.call('HDEL', state_key, 'passed_ranges')
  else
    redis.call('HSET', state_key, 'passed_ranges', table.concat(parts, ' '))
  end
end

-- The claim of the tick before this decision's is won and undecided: note it passed;
-- and note every tick between the watermark and it as passed too.
local function note_prior_passed()
  if prior_tick == 0 then
    -- No tick before is known (a claim taken over, a node's first decision of the job):
    -- every tick from the watermark to the oldest this decision covers is left to whoever
    -- holds its claim. A taker passed a frozen winner's claim it had not taken over, and
    -- that winner, thawed, was answered stale (the scheduler model, racers = 2, seed 41).
    if prev >= 0 and first_tick - prev > 1 and first_tick <= decide_tick then
      local ranges = passed_ranges()
      ranges[#ranges + 1] = {prev, first_tick - 1}
      save_ranges(ranges)
    end
    return
  end
  if not prior_key or prior_tick <= prev or prior_tick >= decide_tick then return end
  local held = redis.call('GET', prior_key)
  -- Won and undecided, or gone: run out before this decision came (its holder frozen
  -- past its lifetime, a taker of it too), yet above the watermark, so no decision took
  -- it. Without a watermark (a new or wiped store) a gone claim shows nothing.
  if (held and not string.find(held, '\n', 1, true)) or (not held and prev >= 0) then
    local ticks = passed_ticks()
    ticks[#ticks + 1] = int_text(prior_tick)
    save_passed(ticks)
  end
  if prev >= 0 and prior_tick - prev > 1 then
    local ranges = passed_ranges()
    ranges[#ranges + 1] = {prev, prior_tick - 1}
    save_ranges(ranges)
  end
end

-- This tick lies in a passed range: take it out (the range is split around it).
local function take_passed_range(tick)
  local ranges = passed_ranges()
  for i, r in ipairs(ranges) do
    if r[1] < tick and tick <= r[2] then
      table.remove(ranges, i)
      table.insert(ranges, i, {tick, r[2]})
      table.insert(ranges, i, {r[1], tick - 1})
      save_ranges(ranges)
      return true
    end
  end
  return false
end

-- A passed tick decided late runs its backlog's older ticks too (from ``first``), those
-- in the passed range just below it: the decision that passed them raced them and left
-- them to whoever holds their claim, and this claim covers them. Taken out of the range
-- (so no later decision runs them again); returns the oldest tick taken, or ``tick``.
local function take_backlog(tick, first)
  if first >= tick then return tick end
  local ranges = passed_ranges()
  for i, r in ipairs(ranges) do
    if r[1] < tick - 1 and tick - 1 <= r[2] then
      local lo = math.max(first - 1, r[1])
      table.remove(ranges, i)
      table.insert(ranges, i, {tick - 1, r[2]})
      table.insert(ranges, i, {r[1], lo})
      save_ranges(ranges)
      return lo + 1
    end
  end
  return tick
end

-- This tick was passed while this owner's claim on it was undecided: take it off the list.
local function take_passed(tick)
  local ticks, text = passed_ticks(), int_text(tick)
  for i, t in ipairs(ticks) do
    if t == text then
      table.remove(ticks, i)
      save_passed(ticks)
      return true
    end
  end
  return false
end

-- A manual trigger is decided once. Its claim runs out (catch-up window and skew), and a
-- node that read the trigger in time but was paused before claiming it won the claim
-- anew and ran it again (the scheduler model with racers = 2: a minute's freeze): the
-- job's last triggers decided are kept, newest last, and one among them is stale.
local TRIGGERS_KEPT = 16
if trigger_id ~= '' then
  local done = {}
  for id in string.gmatch(redis.call('HGET', state_key, 'triggers') or '', '%S+') do
    if id == trigger_id then
      if not redecided then return reply('stale', 0) end
    else
      done[#done + 1] = id
    end
  end
  done[#done + 1] = trigger_id
  while #done > TRIGGERS_KEPT do table.remove(done, 1) end
  redis.call('HSET', state_key, 'triggers', table.concat(done, ' '))
end

local late = false
if mode ~= 'trigger' then
  local raw = redis.call('GET', last_key)
  if raw then prev = tonumber(raw) end
  if prev >= decide_tick then
    -- A later tick was decided first. Stale, unless that decision passed this tick while
    -- this owner's claim on it was undecided: then no one else decided it, and no one else
    -- can (the claim is ours), so it is decided now, late. A plan that runs nothing (a
    -- backlog under catchup = skip, read back after its answer was lost) is missed.
    -- A claim gone (its winner frozen past the claim's TTL, which outlasts the catch-up
    -- window) no longer proves whose the tick was; but the decision that passed it left it
    -- to its winner alone, and only a winner decides a tick it did not lose: answered
    -- missed, too late for any catch-up, once (the scheduler model lost it unrecorded).
    local expired = request_id ~= '' and not claim
    if not ((mode == 'run' or mode == 'mark') and (remember or expired)
            and (take_passed(decide_tick) or take_passed_range(decide_tick))) then
      return reply('stale', 0)
    end
    -- Its backlog's older ticks in the passed range just below it were left to this claim
    -- too: decided with it (run, or counted missed from late_from), taken out of the range.
    late_from = take_backlog(decide_tick, first_tick)
    if not late_ok or mode == 'mark' or expired then
      return reply('missed', 0)
    end
    late, mode = true, 'trigger'  -- decided like a trigger: the watermark stays where it is
    -- The run is for the oldest tick this decision took and fires, not the plan's first:
    -- older ticks of the plan were another decision's (queued, run or recorded there), or
    -- are counted missed by the caller (beyond max_catchup).
    run_tick = math.max(run_tick, late_from)
  else
    note_prior_passed()
    redis.call('SET', last_key, int_text(mark_tick))
    if mode == 'mark' then
      return reply('marked', 0)
    end
  end
end

-- A scheduled tick decided behind the watermark (passed and decided late, or decided again
-- because its grant's lease ran out before the answer came back): older than any tick
-- queued since.
local behind = mode == 'trigger' and trigger_id == ''

if redis.call('HGET', state_key, 'paused') == '1' then
  redis.call('HINCRBY', state_key, 'skipped_paused', 1)
  return reply('skipped:paused', 0)
end

local lease = redis.call('HMGET', lease_key, 'owner', 'fence')
local alive = lease[2] ~= false
if alive then
  holder_fence = tonumber(lease[2])
  holder_owner = lease[1] or ''
else
  local run = redis.call('HMGET', state_key, 'run_fence', 'run_tick', 'run_owner')
  if run[1] then
    ab_fence = tonumber(run[1]) or 0
    ab_tick = tonumber(run[2]) or 0
    ab_owner = run[3] or ''
    redis.call('HDEL', state_key, 'run_fence', 'run_tick', 'run_owner')
    redis.call('HINCRBY', state_key, 'abandoned', 1)
  end
  -- A tick queued behind a run that died is older than this one: this one supersedes it.
  -- Unless this one is an older tick decided late (queue_one): it runs first, and the
  -- newer tick still waits, handed on when this run releases.
  local waiting = redis.call('GET', pending_key)
  if waiting and not (overlap == 'queue_one' and behind and tonumber(waiting) > decide_tick) then
    superseded = tonumber(waiting)
    superseded_trigger = redis.call('HGET', state_key, 'pending_trigger') or ''
    redis.call('DEL', pending_key)
    redis.call('HDEL', state_key, 'pending_trigger')
  end
end

if overlap == 'allow' then
  return reply('run', take_fence())
end

if alive then
  if overlap == 'queue_one' then
    local waiting = redis.call('GET', pending_key)
    if waiting and behind and tonumber(waiting) > decide_tick then
      -- An older tick decided late never displaces a newer waiting tick: queue one keeps
      -- the newest (a newer tick overwrites the waiting one, never the other way round).
      redis.call('HINCRBY', state_key, 'skipped_overlap', 1)
      return reply('skipped:overlap', 0)
    end
    if waiting then
      superseded = tonumber(waiting)
      superseded_trigger = redis.call('HGET', state_key, 'pending_trigger') or ''
    end
    -- The newest tick waits, the one this decision is for (a catch-up's claimed tick, which
    -- its record names; the caller records its older ticks skipped): queue one keeps the
    -- newest. A trigger waits as itself (its decide_tick is its own).
    redis.call('SET', pending_key, int_text(decide_tick))
    -- A waiting trigger must run as that trigger (its id, its record), not as a tick.
    if trigger_id ~= '' then
      redis.call('HSET', state_key, 'pending_trigger', trigger_id)
    else
      redis.call('HDEL', state_key, 'pending_trigger')
    end
    redis.call('HINCRBY', state_key, 'queued', 1)
    return reply('queued', 0)
  elseif overlap ~= 'replace' or late then  -- an older tick never replaces a newer run
    redis.call('HINCRBY', state_key, 'skipped_overlap', 1)
    return reply('skipped:overlap', 0)
  end
end

local fence = take_fence()
grant(lease_key, state_key, owner, fence, run_tick, ttl_ms)
if hold_ms > 0 and overlap ~= 'replace' then
  -- Unstarted until its hold ends: a run alive since before the wipe that re-asserts its
  -- lease takes it back (renew.lua), and this grant must not start.
  redis.call('HSET', lease_key, 'held', 1)
end
return reply('run', fence)
