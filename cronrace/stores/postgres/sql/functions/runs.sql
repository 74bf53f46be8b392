-- runs.sql: a run's lease under the dense cursor: renew it, end it (cronrace.protocol.renew
-- and cronrace.protocol.release as PL/pgSQL; cronrace/protocol/lease.py is the spec).
--
-- renew_lease(p_ns, p_job, p_fence, p_ttl_ms, p_owner, p_tick, p_starting, p_trigger,
--             p_history) -> jsonb {answer, warnings (scrub's)}
--   A re-asserted lease keeps its run's trigger (p_trigger, '' for a tick), and the grant it
--   displaces gets its result in the job's records (kept to p_history): lease_lost when its
--   lease was live, abandoned when it had run out.
--   Extend the lease held with p_fence (answer 1). Otherwise, given p_owner (''; never), write it
--   back when the database lost it under a live run (2, re-asserted: a lease for p_tick,
--   the counter raised to its fence at least): no live lease and no counter (nothing was
--   granted since the loss), or no live lease while the wipe hold is on; or, during the
--   hold, a live lease that is a held grant (not started) or one re-asserted with a lower
--   fence. Else 0 (no live lease) or -1 (another fence holds it): the run stops.
--   p_starting: a held grant's run starts its handler (no longer held).
--
-- end_runs(p_ns, p_requests) -> TABLE (i integer, reply jsonb)
--   Runs ending together, one statement: end_run(p_ns, request) for each of the JSON array
--   (job, fence, owner, ttl_ms, record, hand_on, history), through each_request
--   (decide.sql): one row per request, i its 0-based index, {error, sqlstate} for one that
--   failed.
--
-- end_run(p_ns, r) -> jsonb {decision, fence, tick, trigger, hold_ms, records, warnings}
--   r: {job, fence, owner, ttl_ms, record, hand_on, history}.
--   Only while p_fence holds the live lease, or, once that lease ran out, while it is the
--   run's that no decision has recorded abandoned yet (else {decision: not_owner}, nothing
--   written): append p_record (a RunRecord JSON, or null), then hand the lease on to the
--   grant's next tick, else the queued one (decision run: the caller runs `tick` under the
--   new `fence`, `trigger` the queued trigger's id or null, after hold_ms), or release it.
--   Without p_hand_on (the caller stops) those ticks are recorded cancelled instead.
--   records: what it appended (RunRecord JSON). history: records kept (0: 1000).
--
-- scrub(p_ns, p_job, p_now_us, p_ttl_ms, p_make) -> text
--   Lock the job's row (made first when missing, with p_make: a new job, or a lost row)
--   and move aside what no cronrace writes there (an operator's edit):
--   a lease that is not whole (owner, a positive fence, an expiry, ticks) goes, and the
--   job holds new grants for p_ttl_ms (a run may have held it, as after a wipe); a run
--   mirror that is not whole, a counter below 1, a negative cursor or origin, a negative
--   queued tick, outstanding triggers that are not [id, posted_ms] pairs. Each goes to the quarantine
--   table (lib.sql); returns the warning items "kind|jobs.<kind> of <job>|quarantine",
--   comma-separated ('' when the row is clean, NULL when there is none). decide_one, renew_lease and
--   end_run call it first: what they read is then what the reference knows.
--
-- Both lock the job's row; renew_lease waits at most 500 ms for it (lock_wait, lib.sql),
-- end_runs as each_request does: a row another session holds answers lock_not_available
-- (55P03), retried.

CREATE OR REPLACE FUNCTION @schema@.scrub(
  p_ns text, p_job text, p_now_us bigint, p_ttl_ms bigint, p_make boolean DEFAULT false
) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  j @schema@.jobs%ROWTYPE;
  warnings text[] := '{}';
BEGIN
  SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = p_job FOR UPDATE;
  IF NOT FOUND THEN
    IF p_make THEN
      INSERT INTO @schema@.jobs (ns, job) VALUES (p_ns, p_job) ON CONFLICT DO NOTHING;
      RETURN '';
    END IF;
    RETURN NULL;
  END IF;
  IF (j.lease_owner IS NOT NULL OR j.lease_fence IS NOT NULL OR j.lease_expires_us IS NOT NULL)
     AND NOT (j.lease_owner IS NOT NULL AND j.lease_fence > 0 AND j.lease_expires_us IS NOT NULL
              AND cardinality(j.lease_ticks) > 0 AND 0 <= ALL (j.lease_ticks)) THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'lease', concat_ws(' ',
      j.lease_owner, j.lease_fence, j.lease_ticks, j.lease_expires_us), p_now_us);
    UPDATE @schema@.jobs SET lease_owner = NULL, lease_fence = NULL, lease_ticks = NULL,
      lease_tick = NULL, lease_trigger = NULL, lease_expires_us = NULL, lease_held = false,
      lease_reasserted = false, lease_started_ms = NULL,
      hold_fence = @schema@.hold_fence(hold_until_us, hold_fence, p_now_us,
                                       greatest(coalesce(fence, 0), p_now_us)),
      hold_until_us = greatest(coalesce(hold_until_us, 0), (p_now_us / 1000 + p_ttl_ms) * 1000)
    WHERE ns = p_ns AND job = p_job;
  END IF;
  IF (j.run_owner IS NOT NULL OR j.run_fence IS NOT NULL OR j.run_ticks IS NOT NULL)
     AND NOT (j.run_owner IS NOT NULL AND j.run_fence > 0 AND cardinality(j.run_ticks) > 0
              AND 0 <= ALL (j.run_ticks)) THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'run', concat_ws(' ',
      j.run_owner, j.run_fence, j.run_ticks), p_now_us);
    UPDATE @schema@.jobs SET run_owner = NULL, run_fence = NULL, run_ticks = NULL,
      run_tick = NULL, run_trigger = NULL
    WHERE ns = p_ns AND job = p_job;
  END IF;
  IF j.fence < 1 THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'fence', j.fence::text, p_now_us);
    UPDATE @schema@.jobs SET fence = NULL WHERE ns = p_ns AND job = p_job;
  END IF;
  IF j.cursor_tick < 0 OR j.origin_tick < 0 THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'cursor_tick',
      concat_ws(' ', j.cursor_tick, j.origin_tick), p_now_us);
    UPDATE @schema@.jobs SET cursor_tick = NULL, origin_tick = NULL
    WHERE ns = p_ns AND job = p_job;
  END IF;
  IF j.pending_tick < 0 THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'pending',
      concat_ws(' ', j.pending_tick, j.pending_trigger), p_now_us);
    UPDATE @schema@.jobs SET pending_tick = NULL, pending_trigger = NULL
    WHERE ns = p_ns AND job = p_job;
  END IF;
  IF j.outstanding <> '[]' AND (CASE WHEN jsonb_typeof(j.outstanding) <> 'array' THEN true ELSE EXISTS (
        SELECT FROM jsonb_array_elements(j.outstanding) e
        WHERE CASE WHEN jsonb_typeof(e) <> 'array' THEN true
                   ELSE jsonb_array_length(e) <> 2 OR jsonb_typeof(e->0) <> 'string'
                        OR jsonb_typeof(e->1) <> 'number' END) END) THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'outstanding',
      j.outstanding::text, p_now_us);
    UPDATE @schema@.jobs SET outstanding = '[]' WHERE ns = p_ns AND job = p_job;
  END IF;
  RETURN array_to_string(warnings, ',');
END
$$;

DROP FUNCTION IF EXISTS @schema@.renew_lease(text, text, bigint, bigint, text, bigint, boolean);
CREATE OR REPLACE FUNCTION @schema@.renew_lease(
  p_ns text, p_job text, p_fence bigint, p_ttl_ms bigint, p_owner text, p_tick bigint,
  p_starting boolean, p_trigger text, p_history integer
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  j @schema@.jobs%ROWTYPE;
  t_us bigint := @schema@.now_us();
  t_ms bigint := t_us / 1000;
  live boolean;
  holding boolean;
  warnings text;
  answer integer;
BEGIN
  PERFORM @schema@.lock_wait(500);
  warnings := @schema@.scrub(p_ns, p_job, t_us, p_ttl_ms);
  SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = p_job FOR UPDATE;
  IF NOT FOUND THEN
    IF p_owner = '' THEN
      RETURN jsonb_build_object('answer', 0, 'warnings', warnings);
    END IF;
    INSERT INTO @schema@.jobs (ns, job) VALUES (p_ns, p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = p_job FOR UPDATE;
  END IF;
  live := j.lease_fence IS NOT NULL AND j.lease_expires_us > t_us;
  IF live AND j.lease_fence = p_fence THEN
    UPDATE @schema@.jobs SET lease_expires_us = (t_ms + p_ttl_ms) * 1000,
      lease_held = lease_held AND NOT p_starting
    WHERE ns = p_ns AND job = p_job;
    RETURN jsonb_build_object('answer', 1, 'warnings', warnings);
  END IF;
  -- During the hold, only a run granted before the loss (its fence at most the hold's)
  -- writes its lease back: a grant made during the hold never takes it from such a run.
  holding := coalesce(j.hold_until_us, 0) / 1000 > t_ms AND p_fence <= j.hold_fence;
  IF p_owner <> '' AND (
       (NOT live AND (j.fence IS NULL OR holding))
       OR (live AND holding AND (j.lease_held OR (j.lease_reasserted AND j.lease_fence < p_fence))))
  THEN
    -- The grant it displaces (not its own) gets its result, as a decision's would.
    IF j.run_fence IS NOT NULL AND j.run_fence <> p_fence THEN
      PERFORM @schema@.append_records(p_ns, p_job, @schema@.records_of(p_job, j.run_ticks,
        CASE WHEN live THEN 'lease_lost' ELSE 'abandoned' END, split_part(j.run_owner, ':', 1),
        j.run_fence, j.run_trigger, t_ms), p_history, t_us);
    END IF;
    UPDATE @schema@.jobs SET lease_owner = p_owner, lease_fence = p_fence,
      lease_ticks = ARRAY[p_tick], lease_tick = p_tick, lease_trigger = nullif(p_trigger, ''),
      lease_started_ms = t_ms, lease_expires_us = (t_ms + p_ttl_ms) * 1000,
      lease_held = false, lease_reasserted = true,
      run_owner = p_owner, run_fence = p_fence, run_ticks = ARRAY[p_tick], run_tick = p_tick,
      run_trigger = nullif(p_trigger, ''),
      fence = CASE WHEN coalesce(fence, 0) < p_fence THEN greatest(p_fence, t_us) ELSE fence END
    WHERE ns = p_ns AND job = p_job;
    RETURN jsonb_build_object('answer', 2, 'warnings', warnings);
  END IF;
  answer := CASE WHEN live THEN -1 ELSE 0 END;
  RETURN jsonb_build_object('answer', answer, 'warnings', warnings);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.end_run(p_ns text, r jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  p_job text := r->>'job';
  p_fence bigint := (r->>'fence')::bigint;
  p_owner text := r->>'owner';
  p_ttl_ms bigint := (r->>'ttl_ms')::bigint;
  p_record jsonb := nullif(r->'record', 'null'::jsonb);
  p_hand_on boolean := (r->>'hand_on')::boolean;
  p_history integer := coalesce((r->>'history')::integer, 0);
  j @schema@.jobs%ROWTYPE;
  t_us bigint := @schema@.now_us();
  t_ms bigint := t_us / 1000;
  v_node text := split_part(p_owner, ':', 1);
  recs jsonb := '[]';
  rest bigint[];
  v_ticks bigint[];
  v_trigger text;
  nf record;
  hold_ms bigint;
  live boolean;
  warnings text;
BEGIN
  warnings := @schema@.scrub(p_ns, p_job, t_us, p_ttl_ms);
  SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = p_job FOR UPDATE;
  live := j.lease_fence IS NOT NULL AND j.lease_expires_us > t_us;
  IF live AND j.lease_fence = p_fence THEN
    rest := coalesce(j.lease_ticks[2:], '{}');
  ELSIF NOT live AND j.run_fence = p_fence THEN  -- lapsed, not yet recorded abandoned
    rest := coalesce(j.run_ticks[2:], '{}');
  ELSE  -- also: no row (NOT FOUND leaves j's fields null)
    RETURN jsonb_build_object('decision', 'not_owner', 'warnings', warnings);
  END IF;
  IF p_record IS NOT NULL THEN
    recs := jsonb_build_array(p_record);
  END IF;
  IF p_hand_on AND (cardinality(rest) > 0 OR j.pending_tick IS NOT NULL) THEN
    IF cardinality(rest) > 0 THEN
      v_ticks := rest;
    ELSE
      v_ticks := ARRAY[j.pending_tick];
      v_trigger := j.pending_trigger;
      j.pending_tick := NULL;
      j.pending_trigger := NULL;
    END IF;
    SELECT * INTO nf FROM @schema@.next_fence(j.fence, CASE WHEN live THEN j.lease_fence END,
                                              0, t_us);
    hold_ms := greatest(0, coalesce(j.hold_until_us, 0) / 1000 - t_ms);
    UPDATE @schema@.jobs SET fence = nf.fence, lease_owner = p_owner, lease_fence = nf.fence,
      lease_ticks = v_ticks, lease_tick = v_ticks[1], lease_trigger = v_trigger,
      lease_started_ms = t_ms, lease_expires_us = (t_ms + p_ttl_ms) * 1000,
      lease_held = hold_ms > 0, lease_reasserted = false,
      run_owner = p_owner, run_fence = nf.fence, run_ticks = v_ticks, run_tick = v_ticks[1],
      run_trigger = v_trigger, pending_tick = j.pending_tick, pending_trigger = j.pending_trigger
    WHERE ns = p_ns AND job = p_job;
    PERFORM @schema@.append_records(p_ns, p_job, recs, p_history, t_us);
    RETURN jsonb_build_object('decision', 'run', 'fence', nf.fence, 'tick', v_ticks[1],
      'trigger', v_trigger, 'hold_ms', hold_ms, 'records', recs, 'warnings', warnings);
  END IF;
  IF NOT p_hand_on THEN
    recs := recs || @schema@.records_of(p_job, rest, 'cancelled', v_node, p_fence, NULL, t_ms);
    IF j.pending_tick IS NOT NULL THEN
      recs := recs || @schema@.record_json(p_job, j.pending_tick, 'cancelled', v_node, 0,
                                           j.pending_trigger, t_ms);
      j.pending_tick := NULL;
      j.pending_trigger := NULL;
    END IF;
  END IF;
  UPDATE @schema@.jobs SET lease_owner = NULL, lease_fence = NULL, lease_ticks = NULL,
    lease_tick = NULL, lease_trigger = NULL, lease_started_ms = NULL, lease_expires_us = NULL,
    lease_held = false, lease_reasserted = false, run_owner = NULL, run_fence = NULL,
    run_ticks = NULL, run_tick = NULL, run_trigger = NULL,
    pending_tick = j.pending_tick, pending_trigger = j.pending_trigger
  WHERE ns = p_ns AND job = p_job;
  PERFORM @schema@.append_records(p_ns, p_job, recs, p_history, t_us);
  RETURN jsonb_build_object('decision', 'released', 'records', recs, 'warnings', warnings);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.end_runs(p_ns text, p_requests jsonb)
RETURNS TABLE (i integer, reply jsonb)
LANGUAGE sql VOLATILE AS $$
  SELECT * FROM @schema@.each_request(p_ns, p_requests, 'end_run')
$$;
