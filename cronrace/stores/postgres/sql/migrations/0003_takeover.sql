-- 0003_takeover.sql: version 3 of the schema: the claim takeover (issue 21).
--
-- Inputs: <schema>, as 0001. Replies: none. No table changes: the functions of this
-- version (replaced with every upgrade) answer 'stale' to a winner whose claim another
-- node took over (statements/take_over.sql), and start a replayed grant only when no
-- fence above it is known. A version of its own so that an agent needing them refuses
-- a schema without them.
SELECT 1;
