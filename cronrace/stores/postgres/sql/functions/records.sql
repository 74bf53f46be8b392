-- records.sql: one record appended to a job's history, which is kept to its newest.
--
-- add_record(p_ns, p_job, p_record, p_history, p_now_us) -> void
--   Append one record and prune the job's records to the newest p_history (record_runs,
--   fleet.sql: the records agents write themselves, such as an allow run's result).

CREATE OR REPLACE FUNCTION @schema@.add_record(
  p_ns text, p_job text, p_record jsonb, p_history integer, p_now_us bigint
) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  oldest bigint;
BEGIN
  INSERT INTO @schema@.runs (ns, job, written_ms, record)
  VALUES (p_ns, p_job, p_now_us / 1000, p_record);
  SELECT id INTO oldest FROM @schema@.runs
  WHERE ns = p_ns AND job = p_job ORDER BY id DESC OFFSET greatest(p_history, 1) LIMIT 1;
  IF oldest IS NOT NULL THEN
    DELETE FROM @schema@.runs WHERE ns = p_ns AND job = p_job AND id <= oldest;
  END IF;
END
$$;
