-- schedules.lua: change stored schedules, all or nothing, and count every change.
--
-- KEYS[1] schedules  hash: <name> -> definition (JSON); field ':version' counts the changes
--                    (a name never contains ':', so the field cannot be a schedule)
-- ARGV[1] quarantine prefix for KEYS[1] (its own name as hash tag: same Cluster slot)
-- ARGV[2...] one triple per change: op, name, definition ('' to remove)
--   op 'add'     the name must be absent
--   op 'update'  the name must be present
--   op 'put'     either
--   op 'remove'  the name must be present
--
-- Every condition is checked before the first write: a refused batch writes nothing.
-- The version is seeded from the server clock in microseconds when missing (a new
-- namespace, or Redis lost its data), so it never goes back to a value a node has seen,
-- and a node whose version differs from the stored one knows it must read everything.
--
-- Reply: {status, detail, first, last, warnings}
--   status 'ok': first..last are the versions of these changes (one each, in order)
--   status 'exists' / 'missing': detail is the name that refused the batch; nothing written
--   warnings: keys moved aside (see _lib.lua)

quarantine_prefix = ARGV[1]
check(KEYS[1], 'hash', 'schedules')

local ops = {}
for i = 2, #ARGV, 3 do
  local op, name = ARGV[i], ARGV[i + 1]
  local present = redis.call('HEXISTS', KEYS[1], name) == 1
  if (op == 'add' and present) then
    return {'exists', name, 0, 0, table.concat(warnings, ',')}
  end
  if ((op == 'update' or op == 'remove') and not present) then
    return {'missing', name, 0, 0, table.concat(warnings, ',')}
  end
  ops[#ops + 1] = {op, name, ARGV[i + 2]}
end

local version = redis.call('HGET', KEYS[1], ':version')
if not is_int(version) then
  redis.call('HSET', KEYS[1], ':version', int_text(now_us()))
end
local first = 0
local last = 0
for _, change in ipairs(ops) do
  if change[1] == 'remove' then
    redis.call('HDEL', KEYS[1], change[2])
  else
    redis.call('HSET', KEYS[1], change[2], change[3])
  end
  last = redis.call('HINCRBY', KEYS[1], ':version', 1)
  if first == 0 then first = last end
end
return {'ok', '', first, last, table.concat(warnings, ',')}
