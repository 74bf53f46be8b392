-- read_claims.sql: who holds each claim (without claiming).
--
-- Inputs: %(ns)s; %(jobs)s, %(ticks)s, %(triggers)s, one array element per claim.
-- Replies: one row per claim, in input order: (i, owner) - owner NULL where none, or where
-- it ran out and is not yet swept (gone, as a Redis key expires).
SELECT w.i, c.owner
FROM unnest(%(jobs)s::text[], %(ticks)s::bigint[], %(triggers)s::text[])
  WITH ORDINALITY AS w (job, tick, trigger_id, i)
LEFT JOIN @schema@.claims c
  ON c.ns = %(ns)s AND c.job = w.job AND c.tick = w.tick AND c.trigger_id = w.trigger_id
  AND c.expires_us > @schema@.now_us()
ORDER BY w.i
