-- acquire.sql: decide every won claim of a wake-up (functions/batches.sql, acquire.sql).
--
-- Inputs: %(ns)s; %(requests)s, a JSON array of acquire()'s inputs, one per won claim.
-- Replies: one row per request, in input order: (i, reply jsonb).
SELECT i, reply FROM @schema@.acquire_many(%(ns)s, %(requests)s::jsonb) ORDER BY i
