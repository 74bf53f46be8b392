-- 0021_triggers_decided.sql: version 21 of the schema: the manual triggers a job decided.
--
-- Inputs: <schema> (substituted). Applied once, by `cronrace db upgrade`.
-- Replies: none. Idempotent (IF NOT EXISTS).
--
-- jobs.triggers: the ids of the job's last 16 manual triggers decided, newest last.
-- acquire() answers 'stale' for one among them (acquire.lua's state.triggers): a trigger's
-- claim runs out, and a node paused between reading the trigger and claiming it won the
-- claim anew and ran it again (the scheduler model with racers = 2).
ALTER TABLE @schema@.jobs ADD COLUMN IF NOT EXISTS triggers text[] NOT NULL DEFAULT '{}';
