-- register_jobs.sql: publish job definitions, so that operator commands can list them.
--
-- Inputs: %(ns)s; %(jobs)s (text[]) and %(specs)s (JSON object texts), sorted by job.
-- Replies: none. A spec's fields are merged into the stored ones; a row that holds them
-- already (a node starting where the fleet published the same definitions) is left
-- alone, not rewritten: no new row version for each of a node's jobs at every start.
INSERT INTO @schema@.jobs AS t (ns, job, registered, spec)
SELECT %(ns)s, s.job, true, s.spec
FROM unnest(%(jobs)s::text[], %(specs)s::jsonb[]) AS s (job, spec)
ORDER BY s.job
ON CONFLICT (ns, job) DO UPDATE SET registered = true, spec = t.spec || excluded.spec
WHERE NOT (t.registered AND t.spec @> excluded.spec)
