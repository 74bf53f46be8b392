-- known_jobs.sql: every job any node of the namespace has registered.
--
-- Inputs: %(ns)s.
-- Replies: (job), sorted.
SELECT job FROM @schema@.jobs WHERE ns = %(ns)s AND registered ORDER BY job
