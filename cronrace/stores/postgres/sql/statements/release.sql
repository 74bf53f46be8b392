-- release.sql: end runs, write their records, hand leases on (functions/batches.sql).
--
-- Inputs: %(ns)s; %(requests)s, a JSON array of release()'s inputs, one per run.
-- Replies: one row per request, in input order: (i, reply jsonb).
SELECT i, reply FROM @schema@.release_many(%(ns)s, %(requests)s::jsonb) ORDER BY i
