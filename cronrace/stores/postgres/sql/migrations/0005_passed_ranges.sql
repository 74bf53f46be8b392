-- 0005_passed_ranges.sql: version 5 of the schema: the ranges of ticks a decision passed.
--
-- Inputs: <schema> (substituted). Applied once, by `cronrace db upgrade`.
-- Replies: none. Idempotent (IF NOT EXISTS).
--
-- jobs.passed_ranges: pairs (lo, hi], newest last, at most 16: a decision that passes the
-- watermark leaves every tick from the watermark to its caller's previous tick to whoever
-- holds that tick's claim (acquire.sql; acquire.lua's state.passed_ranges).
ALTER TABLE @schema@.jobs ADD COLUMN IF NOT EXISTS passed_ranges bigint[] NOT NULL DEFAULT '{}';
