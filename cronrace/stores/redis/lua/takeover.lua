-- takeover.lua: take over a won, undecided claim whose winner's heartbeat has expired.
--
-- KEYS[1] claim     the claim: "<owner>" while undecided, "<owner>\n<request_id>\n<reply>"
--                   once decided (acquire.lua)
-- ARGV[1] owner     the taker, "<node_id>:<nonce>"
-- ARGV[2] departed  the node ids whose heartbeat the taker saw expire, space-separated
-- ARGV[3] quarantine  prefix for keys moved aside: "<ns>:quarantine:{<job>}"
--
-- Reply: {taken, holder, warnings}
--   taken: 1 when the claim was held, undecided, by a process of a departed node and now
--     holds the taker (its TTL kept); 0 otherwise (decided, expired, another holder)
--   holder: the value the claim held ('' when none)
--   warnings: keys moved aside, "kind|key|moved_to" items (see _lib.lua)
--
-- A compare-and-set: the claim changes only if it still names the dead winner and holds
-- no decision, in one atomic step. The winner, should it come back (a frozen process
-- thawed, a partition healed), finds another owner under its claim and is answered
-- 'stale' by acquire.lua; of several takers, the first one's set makes the claim name a
-- live node, and the others find nothing to take.

quarantine_prefix = ARGV[3]
check(KEYS[1], 'string', 'claim')

local held = redis.call('GET', KEYS[1])
if not held then
  return {0, '', table.concat(warnings, ',')}
end
if string.find(held, '\n', 1, true) then
  return {0, held, table.concat(warnings, ',')}  -- decided: nothing to take over
end
local node = string.match(held, '^([^:]*)')
for departed in string.gmatch(ARGV[2], '%S+') do
  if departed == node then
    redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
    return {1, held, table.concat(warnings, ',')}
  end
end
return {0, held, table.concat(warnings, ',')}
