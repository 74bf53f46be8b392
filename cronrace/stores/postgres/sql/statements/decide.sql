-- decide.sql: decide a batch of requests under the dense cursor (functions/decide.sql).
--
-- Inputs: %(ns)s; %(requests)s, a JSON array of DecideRequests, one per won claim.
-- Replies: one row per request, in input order: (i, reply jsonb).
SELECT i, reply FROM @schema@.decide(%(ns)s, %(requests)s::jsonb) ORDER BY i
