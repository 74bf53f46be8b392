-- 0020_late_backlog_first_tick.sql: version 20 of the schema: no table changes.
--
-- Inputs: <schema> (substituted). Applied once, by `cronrace db upgrade`.
-- Replies: none.
--
-- The functions change (replaced by every upgrade): acquire() takes p_first_tick, the
-- oldest tick a decision covers. A passed tick decided late takes its backlog out of the
-- passed range from there, not from the tick its run is for: a run's backlog under
-- catch-up latest (its one fired tick is its newest), or under all beyond max_catchup,
-- left its older ticks in the range, run or counted by no one (the scheduler model with
-- racers = 2). The old signature goes, as in version 19.
DROP FUNCTION IF EXISTS @schema@.acquire(
  text, text, bigint, bigint, bigint, text, bigint, text, text, text, bigint, text, bigint,
  boolean, bigint);
