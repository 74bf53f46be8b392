-- claim.sql: race for every due claim of a wake-up in one statement.
--
-- Inputs: %(ns)s; %(owner)s "<node_id>:<nonce>"; %(jobs)s, %(ticks)s, %(triggers)s
--   ('' for a tick; a trigger's tick is 0) and %(ttls_ms)s, one array element per claim;
--   %(read_backs)s, one per claim: also count as won a claim that already holds %(owner)s
--   undecided (written by an earlier attempt whose reply was lost: the value is unique to
--   this process); one holding a decision (memo) was decided by this process: lost, never
--   decided twice;
--   %(witnesses)s: per claim, the tick of a claim of the same job this node lost while the
--   job had no counter yet (NULL: none), read back as evidence (see store.py).
-- Replies: one row per claim, in input order: (i, won, fence, witness_kept): fence is the
--   job's counter (NULL: none yet), read with the race: a claim lost to a winner whose
--   decision has not been committed yet is no evidence that the job has had a fence; a
--   counter seen is. witness_kept: whether the witness claim is still there (NULL: none
--   asked); gone before its expiry, the database lost the job's rows.
--
-- The one insert that lands wins; a loser writes nothing (the primary key's conflict,
-- no serial column to burn). A claim that has run out is no claim (Redis's PX): it is
-- taken as if absent, so the next in line can claim a dead winner's tick again. Rows are inserted in key order, so two nodes
-- racing for the same jobs wait for each other in one order and never deadlock.
WITH wanted AS (
  SELECT * FROM unnest(%(jobs)s::text[], %(ticks)s::bigint[], %(triggers)s::text[],
                       %(ttls_ms)s::bigint[], %(witnesses)s::bigint[], %(read_backs)s::boolean[])
    WITH ORDINALITY AS w (job, tick, trigger_id, ttl_ms, witness, read_back, i)
), won AS (
  INSERT INTO @schema@.claims (ns, job, tick, trigger_id, owner, expires_us)
  SELECT %(ns)s, w.job, w.tick, w.trigger_id, %(owner)s, @schema@.now_us() + w.ttl_ms * 1000
  FROM wanted w
  ORDER BY w.job, w.tick, w.trigger_id
  ON CONFLICT (ns, job, tick, trigger_id) DO UPDATE
    SET owner = EXCLUDED.owner, expires_us = EXCLUDED.expires_us, request_id = NULL,
        memo = NULL
    WHERE @schema@.claims.expires_us < @schema@.now_us()
  RETURNING job, tick, trigger_id
)
SELECT w.i,
  won.job IS NOT NULL OR (w.read_back AND c.owner IS NOT DISTINCT FROM %(owner)s
                          AND c.memo IS NULL),
  j.fence,
  CASE WHEN w.witness IS NOT NULL THEN EXISTS (
    SELECT 1 FROM @schema@.claims l
    WHERE l.ns = %(ns)s AND l.job = w.job AND l.tick = w.witness AND l.trigger_id = ''
  ) END
FROM wanted w
LEFT JOIN won USING (job, tick, trigger_id)
LEFT JOIN @schema@.claims c
  ON c.ns = %(ns)s AND c.job = w.job AND c.tick = w.tick AND c.trigger_id = w.trigger_id
LEFT JOIN @schema@.jobs j ON j.ns = %(ns)s AND j.job = w.job
ORDER BY w.i
