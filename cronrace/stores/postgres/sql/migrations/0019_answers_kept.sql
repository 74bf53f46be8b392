-- 0019_answers_kept.sql: version 19 of the schema: no table changes.
--
-- Inputs: <schema> (substituted). Applied once, by `cronrace db upgrade`.
-- Replies: none.
--
-- The functions change (replaced by every upgrade): acquire() takes p_keep_ms, how long
-- after the decision its remembered answer must still be there for a retry: a claim
-- decided as it runs out is kept that long, and one that had run out is made anew with
-- the answer. A late decision whose answer was lost (a node thawed past its tick's
-- catch-up window, then the connection dropped) could not be read back, and the missed
-- count it called for was written by no one (the scheduler model with racers = 2).
-- The old signature goes: the new parameter has a default, and two overloads would make
-- a call ambiguous.
DROP FUNCTION IF EXISTS @schema@.acquire(
  text, text, bigint, bigint, bigint, text, bigint, text, text, text, bigint, text, bigint,
  boolean);
