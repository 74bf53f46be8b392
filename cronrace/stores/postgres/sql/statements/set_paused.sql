-- set_paused.sql: pause or resume a job for every node (acquire reads the flag).
--
-- Inputs: %(ns)s, %(job)s, %(paused)s.
-- Replies: none.
INSERT INTO @schema@.jobs (ns, job, paused) VALUES (%(ns)s, %(job)s, %(paused)s)
ON CONFLICT (ns, job) DO UPDATE SET paused = excluded.paused
