-- take_over.sql: take over won, undecided claims whose winner's node has departed.
--
-- Inputs: %(ns)s; %(owner)s the taker, "<node_id>:<nonce>"; %(departed)s the node ids whose
--   heartbeat the taker saw expire; %(jobs)s, %(ticks)s, %(triggers)s ('' for a tick; a
--   trigger's tick is 0), one array element per claim.
-- Replies: one row per claim taken over: (i, holder), the process it was taken from.
--
-- A compare-and-set (the Redis store's takeover.lua): a claim changes owner only while it
-- names a process of a departed node, holds no decision (memo) and has not expired. Rows
-- are locked in key order; a taker that waited for another re-reads the row (READ
-- COMMITTED re-checks the WHERE on the newest version) and finds a live owner: nothing to
-- take. The winner, back later, finds another owner under its claim: acquire() answers
-- 'stale'.
WITH wanted AS (
  SELECT * FROM unnest(%(jobs)s::text[], %(ticks)s::bigint[], %(triggers)s::text[])
    WITH ORDINALITY AS w (job, tick, trigger_id, i)
), old AS (
  SELECT w.i, c.job, c.tick, c.trigger_id, c.owner
  FROM wanted w
  JOIN @schema@.claims c
    ON c.ns = %(ns)s AND c.job = w.job AND c.tick = w.tick AND c.trigger_id = w.trigger_id
  WHERE c.memo IS NULL AND c.expires_us > @schema@.now_us()
    AND split_part(c.owner, ':', 1) = ANY (%(departed)s::text[])
  ORDER BY c.job, c.tick, c.trigger_id
  FOR UPDATE OF c
)
UPDATE @schema@.claims c SET owner = %(owner)s
FROM old
WHERE c.ns = %(ns)s AND c.job = old.job AND c.tick = old.tick
  AND c.trigger_id = old.trigger_id AND c.memo IS NULL
  AND split_part(c.owner, ':', 1) = ANY (%(departed)s::text[])
RETURNING old.i, old.owner
