-- lease.sql: renew a running lease; release it, or hand it on (renew.lua and release.lua).
--
-- renew(p_ns, p_job, p_fence, p_ttl_ms, p_owner, p_tick, p_starting) -> jsonb {answer, warnings}
--   p_owner     the run's owner: a lease lost with the job's data may be re-asserted
--               ('' never)
--   p_tick      the run's tick (written in a re-asserted lease)
--   p_starting  a run held after a wipe starts its handler: its grant is no longer one a
--               re-asserted older run may take the lease from
--   answer: 1 renewed; 2 re-asserted (the lease was lost with the job's data: the job's
--     row is gone, or its fence counter, or the wipe hold is on; it is written back, and
--     takes the lease from a grant of the hold whose run has not started, lease_held);
--     0 the lease is gone (expired, released, or garbage moved aside); -1 another fence
--     holds it (replaced, or taken back by a re-asserted older run). 0 and -1 both stop
--     the caller's run. A re-asserted lease raises the fence counter to its fence at least.
--
-- release(p_ns, p_job, p_fence, p_owner, p_ttl_ms, p_continue_tick, p_record, p_history)
--   -> jsonb {decision, fence, tick, warnings, hold_ms, trigger}
--   p_fence          the fence being released
--   p_owner          "<node_id>:<nonce>", the owner of a handed-on run
--   p_continue_tick  0, or a catch-up tick the caller runs next under the same lease
--   p_record         the finished run's record (JSON), or NULL for none
--   p_history        how many records of the job are kept
--   decision: released | run (the caller runs `tick` with the new `fence`) | not_owner
--   hold_ms: the handed-on run must wait this long before its handler starts
--   trigger: the manual trigger id when the handed-on tick is a queued trigger ('')
--   The record is written only when the fence matched: a retried release whose first
--   attempt committed answers not_owner and writes nothing, so the record is written once.
--
-- add_record(p_ns, p_job, p_record, p_history, p_now_us) -> void
--   Append one record and prune the job's records to the newest p_history.
--
-- Both lock the job's row, as acquire does; renew waits at most 500 ms for it (lock_wait
-- in lib.sql): a row another session holds answers lock_not_available, retried.

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

CREATE OR REPLACE FUNCTION @schema@.lease_garbled(j @schema@.jobs) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT (j.lease_owner IS NOT NULL OR j.lease_fence IS NOT NULL OR j.lease_expires_us IS NOT NULL)
     AND NOT (j.lease_owner IS NOT NULL AND j.lease_fence > 0 AND j.lease_expires_us IS NOT NULL
              AND j.lease_tick IS NOT NULL)
$$;

CREATE OR REPLACE FUNCTION @schema@.renew(
  p_ns text, p_job text, p_fence bigint, p_ttl_ms bigint, p_owner text, p_tick bigint,
  p_starting boolean
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  j @schema@.jobs%ROWTYPE;
  t_now bigint := @schema@.now_us();
  warning text;
  v_live boolean;
BEGIN
  PERFORM @schema@.lock_wait(500);
  SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = p_job FOR UPDATE;
  IF NOT FOUND THEN
    IF p_owner = '' THEN
      RETURN jsonb_build_object('answer', 0, 'warnings', '');
    END IF;
    -- The job's row was lost under a live run: write its lease back.
    INSERT INTO @schema@.jobs (ns, job) VALUES (p_ns, p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = p_job FOR UPDATE;
  END IF;
  IF @schema@.lease_garbled(j) THEN
    warning := @schema@.quarantine(p_ns, p_job, 'lease',
      concat_ws(' ', j.lease_owner, j.lease_fence, j.lease_tick, j.lease_expires_us), t_now);
    -- The caller stops its run at once; a grant made before it has may not start yet.
    UPDATE @schema@.jobs SET lease_owner = NULL, lease_fence = NULL, lease_tick = NULL,
      lease_started_ms = NULL, lease_expires_us = NULL,
      hold_until_us = greatest(coalesce(hold_until_us, 0), t_now + p_ttl_ms * 1000)
    WHERE ns = p_ns AND job = p_job;
    RETURN jsonb_build_object('answer', 0, 'warnings', warning);
  END IF;
  v_live := j.lease_fence IS NOT NULL AND j.lease_expires_us > t_now;
  IF v_live AND j.lease_fence = p_fence THEN
    UPDATE @schema@.jobs SET lease_expires_us = t_now + p_ttl_ms * 1000,
      lease_held = lease_held AND NOT p_starting
    WHERE ns = p_ns AND job = p_job;
    RETURN jsonb_build_object('answer', 1, 'warnings', '');
  END IF;
  IF p_owner <> '' AND (
       (NOT v_live AND (j.fence IS NULL OR coalesce(j.hold_until_us, 0) > t_now))
       OR (v_live AND j.lease_held AND coalesce(j.hold_until_us, 0) > t_now)) THEN
    UPDATE @schema@.jobs SET lease_owner = p_owner, lease_fence = p_fence, lease_tick = p_tick,
      lease_started_ms = t_now / 1000, lease_expires_us = t_now + p_ttl_ms * 1000,
      lease_held = false, run_fence = p_fence, run_tick = p_tick, run_owner = p_owner,
      fence = CASE WHEN coalesce(fence, 0) < p_fence THEN greatest(p_fence, t_now) ELSE fence END
    WHERE ns = p_ns AND job = p_job;
    RETURN jsonb_build_object('answer', 2, 'warnings', '');
  END IF;
  IF NOT v_live THEN
    RETURN jsonb_build_object('answer', 0, 'warnings', '');
  END IF;
  RETURN jsonb_build_object('answer', -1, 'warnings', '');
END
$$;

CREATE OR REPLACE FUNCTION @schema@.release(
  p_ns text, p_job text, p_fence bigint, p_owner text, p_ttl_ms bigint,
  p_continue_tick bigint, p_record jsonb, p_history integer
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  j @schema@.jobs%ROWTYPE;
  t_now bigint := @schema@.now_us();
  warnings text[] := '{}';
  next_tick bigint := p_continue_tick;
  v_trigger text := '';
  nf record;
BEGIN
  SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = p_job FOR UPDATE;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('decision', 'not_owner', 'fence', 0, 'tick', 0,
                              'warnings', '', 'hold_ms', 0, 'trigger', '');
  END IF;
  IF @schema@.lease_garbled(j) THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'lease',
      concat_ws(' ', j.lease_owner, j.lease_fence, j.lease_tick, j.lease_expires_us), t_now);
    j.lease_owner := NULL; j.lease_fence := NULL; j.lease_tick := NULL;
    j.lease_started_ms := NULL; j.lease_expires_us := NULL;
  END IF;
  IF j.fence IS NOT NULL AND j.fence <= 0 THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'fence', j.fence::text, t_now);
    j.fence := NULL;
  END IF;
  IF j.pending_tick < 0 THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'pending', j.pending_tick::text, t_now);
    j.pending_tick := NULL;
    j.pending_trigger := NULL;
  END IF;

  IF j.lease_fence IS DISTINCT FROM p_fence OR j.lease_expires_us <= t_now THEN
    IF cardinality(warnings) > 0 THEN
      UPDATE @schema@.jobs SET lease_owner = j.lease_owner, lease_fence = j.lease_fence,
        lease_tick = j.lease_tick, lease_started_ms = j.lease_started_ms,
        lease_expires_us = j.lease_expires_us, fence = j.fence,
        pending_tick = j.pending_tick, pending_trigger = j.pending_trigger
      WHERE ns = p_ns AND job = p_job;
    END IF;
    RETURN jsonb_build_object('decision', 'not_owner', 'fence', 0, 'tick', 0,
                              'warnings', array_to_string(warnings, ','), 'hold_ms', 0,
                              'trigger', '');
  END IF;
  IF p_record IS NOT NULL THEN
    PERFORM @schema@.add_record(p_ns, p_job, p_record, p_history, t_now);
  END IF;

  IF next_tick = 0 AND j.pending_tick IS NOT NULL THEN
    next_tick := j.pending_tick;
    v_trigger := coalesce(j.pending_trigger, '');
    j.pending_tick := NULL;
    j.pending_trigger := NULL;
  END IF;

  IF next_tick <> 0 THEN
    SELECT * INTO nf FROM @schema@.next_fence(j.fence, j.lease_fence, 0, t_now);
    UPDATE @schema@.jobs SET fence = nf.fence,
      lease_held = coalesce(j.hold_until_us, 0) > t_now,  -- unstarted until its hold ends
      lease_owner = p_owner, lease_fence = nf.fence, lease_tick = next_tick,
      lease_started_ms = t_now / 1000, lease_expires_us = t_now + p_ttl_ms * 1000,
      run_fence = nf.fence, run_tick = next_tick, run_owner = p_owner,
      pending_tick = j.pending_tick, pending_trigger = j.pending_trigger
    WHERE ns = p_ns AND job = p_job;
    RETURN jsonb_build_object('decision', 'run', 'fence', nf.fence, 'tick', next_tick,
      'warnings', array_to_string(warnings, ','),
      'hold_ms', greatest(0, coalesce(j.hold_until_us, 0) - t_now) / 1000,
      'trigger', v_trigger);
  END IF;

  UPDATE @schema@.jobs SET fence = j.fence,
    lease_owner = NULL, lease_fence = NULL, lease_tick = NULL, lease_started_ms = NULL,
    lease_expires_us = NULL, run_fence = NULL, run_tick = NULL, run_owner = NULL,
    pending_tick = j.pending_tick, pending_trigger = j.pending_trigger
  WHERE ns = p_ns AND job = p_job;
  RETURN jsonb_build_object('decision', 'released', 'fence', 0, 'tick', 0,
                            'warnings', array_to_string(warnings, ','), 'hold_ms', 0,
                            'trigger', '');
END
$$;
