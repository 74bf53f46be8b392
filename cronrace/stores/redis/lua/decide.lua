-- decide.lua: the dense cursor's decision (cronrace/protocol/decide.py is its specification).
--
-- KEYS[1] lease     hash {owner, fence, ticks, trigger, started_ms[, held, reasserted]}, PX
-- KEYS[2] fence     integer counter (next_fence in _lib.lua)
-- KEYS[3] cursor    integer tick: every tick of (origin, cursor] is decided and recorded
-- KEYS[4] pending   the one tick waiting under queue_one
-- KEYS[5] state     hash {paused, origin, run_owner, run_fence, run_ticks, run_trigger,
--                   pending_trigger}: the run mirrors the lease without its expiry
-- KEYS[6] claim     the request's claim: "<owner>", then "<owner>\n<memo>" once decided
-- KEYS[7] hold      present while new grants must wait (the store lost the job's data), PX
-- KEYS[8] runs      the job's history stream (RunRecord JSON under field "r")
-- KEYS[9] triggers  hash {trigger id -> posted ms}: outstanding manual triggers
-- ARGV[1] tick       T, the tick whose claim the caller won (a trigger: when it was asked)
-- ARGV[2] cursor     the cursor the caller expects ('' : none known)
-- ARGV[3] from       the plan's exclusive lower bound (the origin of a first decision)
-- ARGV[4] fire       the ticks to fire, oldest first, space-separated
-- ARGV[5] missed     the ranges not fired: "first:last:count" items, space-separated
-- ARGV[6] owner      "<node>:<nonce>"
-- ARGV[7] overlap    skip | queue_one | replace | allow
-- ARGV[8] lease_ttl_ms     ARGV[9] claim_ttl_ms
-- ARGV[10] known_fence     the highest fence the caller has seen for the job (0: none)
-- ARGV[11] trigger_window_ms   outstanding triggers older are recorded missed (0: never)
-- ARGV[12] trigger_id  a manual trigger's decision ('' : a tick's)
-- ARGV[13] history   approximate MAXLEN of the history stream
-- ARGV[14] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
-- ARGV[15] job       the job's name, written in its records
--
-- Reply: {answer, cursor, verdict, fence, fences, ticks, hold_ms, data_lost, replayed,
--         renewed, warnings, record...}
--   answer: decided | covered | lost | moved | stale; cursor: found or set ('' : none)
--   verdict: run | nothing | skipped:paused | skipped:overlap | queued ('' unless decided)
--   fences, ticks: space-separated; records: the RunRecord JSON appended, in order
-- The memo kept under the claim is "<owner>\n" then cursor, verdict, fence, fences, ticks,
-- hold_ms and data_lost, one a line: a retry (replay) answers it again, without records.

local lease_key, fence_key, cursor_key, pending_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local state_key, claim_key, hold_key = KEYS[5], KEYS[6], KEYS[7]
local runs_key, triggers_key = KEYS[8], KEYS[9]
local tick, expected, from = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local owner, overlap = ARGV[6], ARGV[7]
local lease_ttl, claim_ttl = tonumber(ARGV[8]), tonumber(ARGV[9])
local known_fence, window = tonumber(ARGV[10]), tonumber(ARGV[11])
local trigger = ARGV[12] ~= '' and ARGV[12] or nil
local history, job = ARGV[13], ARGV[15]
quarantine_prefix = ARGV[14]
local node = string.match(owner, '^[^:]*')

-- Every key is checked before the first write: a decision happens whole or not at all.
check(hold_key, 'string', 'hold')
check_int(fence_key, 'fence')
if check_lease(lease_key) then
  -- Whether a run held the garbled lease is unknown: hold as after a wipe.
  start_hold(hold_key, lease_ttl, fence_floor(fence_key, lease_key, 0))
end
check_int(cursor_key, 'cursor')
check_int(pending_key, 'pending')
check(state_key, 'hash', 'state')
check(claim_key, 'string', 'claim')
check(runs_key, 'stream', 'runs')
check(triggers_key, 'hash', 'triggers')

local function words(text, pattern)
  local out = {}
  for w in string.gmatch(text or '', pattern or '%S+') do out[#out + 1] = w end
  return out
end

local now = now_ms()
local records = {}
-- What the operator's status counts (``cronrace status``): not part of the protocol.
local COUNTED = {['skipped:overlap'] = 'skipped_overlap', ['skipped:paused'] = 'skipped_paused',
  missed = 'missed', queued = 'queued', abandoned = 'abandoned'}
local function record(t, outcome, who, fence, trig, count, last)
  records[#records + 1] = run_record(job, t, who, outcome, fence, trig, count, last, now)
  if COUNTED[outcome] then redis.call('HINCRBY', state_key, COUNTED[outcome], count or 1) end
end
local function each(ticks, outcome, who, fence, trig)
  for _, t in ipairs(ticks) do record(tonumber(t), outcome, who, fence, trig) end
end

local cursor = tonumber(redis.call('GET', cursor_key) or '')
local claim = redis.call('GET', claim_key)
local function answer(what)
  return {what, cursor and int_text(cursor) or '', '', 0, '', '', 0, 0, 0, 0,
    table.concat(warnings, ',')}
end

-- A retry of a decision made under this claim: its answer again. A grant may start
-- (renewed) only while its lease holds its fence and no fence above it is known.
local head = owner .. '\n'
if claim and string.sub(claim, 1, #head) == head then
  local m = words(string.sub(claim, #head + 1) .. '\n', '(.-)\n')
  local renewed = 0
  if m[2] == 'run' then
    local granted = tonumber(m[3])
    local held = tonumber(redis.call('HGET', lease_key, 'fence') or '')
    local newest = math.max(tonumber(redis.call('GET', fence_key) or '0'), known_fence)
    if overlap == 'allow' then
      renewed = 1  -- no lease to lose
    elseif held == granted and newest <= granted then
      redis.call('PEXPIRE', lease_key, lease_ttl)
      renewed = 1
    end
  end
  return {'decided', m[1], m[2], m[3], m[4], m[5], m[6], m[7], 1, renewed,
    table.concat(warnings, ',')}
end
if not trigger and cursor and cursor >= tick then return answer('covered') end
if claim and string.match(claim, '^[^\n]*') ~= owner then return answer('lost') end

local data_lost = 0
if trigger then
  if redis.call('HDEL', triggers_key, trigger) == 0 then return answer('stale') end
elseif cursor ~= expected then
  if cursor or not expected then return answer('moved') end
  -- The store has no cursor where the caller saw one: it lost the job's data. Recorded,
  -- runs granted before may be alive (the hold), and the decision goes on from there.
  data_lost = 1
  record(expected, 'data_lost', node, 0, nil, 1, expected)
  start_hold(hold_key, lease_ttl, fence_floor(fence_key, lease_key, known_fence))
end

-- What ran out: a run whose lease expired unreleased (and the tick queued behind it), and
-- triggers outstanding longer than their window.
local state = redis.call('HGETALL', state_key)
local s = {}
for i = 1, #state, 2 do s[state[i]] = state[i + 1] end
local live = redis.call('EXISTS', lease_key) == 1
if not live then
  if s.run_fence then
    each(words(s.run_ticks), 'abandoned', string.match(s.run_owner or '', '^[^:]*'),
      tonumber(s.run_fence), s.run_trigger)
  end
  local waiting = tonumber(redis.call('GET', pending_key) or '')
  if waiting then record(waiting, 'abandoned', node, 0, s.pending_trigger) end
  redis.call('DEL', pending_key)
  redis.call('HDEL', state_key, 'run_owner', 'run_fence', 'run_ticks', 'run_trigger',
    'pending_trigger')
end
if window > 0 then
  local posted, late = redis.call('HGETALL', triggers_key), {}
  for i = 1, #posted, 2 do
    local at = tonumber(posted[i + 1])
    if at and at + window <= now then late[#late + 1] = {at, posted[i]} end
  end
  table.sort(late, function(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end)
  for _, t in ipairs(late) do
    record(math.floor(t[1] / 1000), 'missed', node, 0, t[2])
    redis.call('HDEL', triggers_key, t[2])
  end
end
for _, m in ipairs(words(ARGV[5])) do
  local first, last, count = string.match(m, '^(%-?%d+):(%-?%d+):(%d+)$')
  record(tonumber(first), 'missed', node, 0, nil, tonumber(count), tonumber(last))
end

-- The ticks it fires: the pause flag, then the overlap policy against the live lease.
local fire = words(ARGV[4])
local verdict, fences, hold_ms = 'nothing', {}, 0
local function take_fence()
  local fence, lost = next_fence(fence_key, lease_key, known_fence)
  if lost then
    data_lost = 1
    start_hold(hold_key, lease_ttl, fence - 1)
  end
  fences[#fences + 1] = int_text(fence)
  hold_ms = hold_left_ms(hold_key)
  return fence
end
if #fire == 0 then
  verdict = 'nothing'
elseif s.paused == '1' then
  verdict = 'skipped:paused'
  each(fire, verdict, node, 0, trigger)
elseif overlap == 'allow' then
  verdict = 'run'
  for _, t in ipairs(fire) do record(tonumber(t), 'granted', node, take_fence(), trigger) end
elseif live and overlap == 'skip' then
  verdict = 'skipped:overlap'
  each(fire, verdict, node, 0, trigger)
elseif live and overlap == 'queue_one' then
  -- At most one waits, the newest: the one it displaces and the older ticks are skipped.
  verdict = 'queued'
  local waiting = tonumber(redis.call('GET', pending_key) or '')
  if waiting then record(waiting, 'skipped:overlap', node, 0, s.pending_trigger) end
  local newest = table.remove(fire)
  each(fire, 'skipped:overlap', node, 0, nil)
  record(tonumber(newest), 'queued', node, 0, trigger)
  redis.call('SET', pending_key, newest)
  if trigger then
    redis.call('HSET', state_key, 'pending_trigger', trigger)
  else
    redis.call('HDEL', state_key, 'pending_trigger')
  end
else
  -- replace: the old run loses its lease (its next renewal fails, it is cancelled).
  if live and s.run_fence then
    each(words(s.run_ticks), 'lease_lost', string.match(s.run_owner or '', '^[^:]*'),
      tonumber(s.run_fence), s.run_trigger)
  end
  verdict = 'run'
  local fence = take_fence()
  local ticks = table.concat(fire, ' ')
  grant_lease(lease_key, state_key, owner, fence, ticks, trigger,
    hold_ms > 0 and overlap ~= 'replace', lease_ttl)
  each(fire, 'granted', node, fence, trigger)
end

if not trigger then
  if not cursor then redis.call('HSET', state_key, 'origin', from) end
  cursor = tick
  redis.call('SET', cursor_key, int_text(tick))
end
for _, r in ipairs(records) do
  redis.call('XADD', runs_key, 'MAXLEN', '~', history, '*', 'r', r)
end
local first_fence = fences[1] or '0'
if overlap ~= 'allow' then fences = {} end
local ticks = verdict == 'run' and ARGV[4] or ''
local out = {'decided', cursor and int_text(cursor) or '', verdict, first_fence,
  table.concat(fences, ' '), ticks, hold_ms, data_lost}
local memo = {}
for i, v in ipairs(out) do memo[i] = type(v) == 'number' and int_text(v) or v end
redis.call('SET', claim_key, head .. table.concat(memo, '\n', 2), 'PX', claim_ttl)
out[#out + 1] = 0
out[#out + 1] = 0
out[#out + 1] = table.concat(warnings, ',')
for _, r in ipairs(records) do out[#out + 1] = r end
return out
