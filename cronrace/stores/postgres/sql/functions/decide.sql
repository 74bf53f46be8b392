-- decide.sql: the dense cursor's decision, cronrace.protocol.decide as PL/pgSQL
-- (docs/design.md section 3; the reference, cronrace/protocol/decide.py, is the spec).
--
-- decide(p_ns, p_requests) -> TABLE (i integer, reply jsonb)
--   p_requests: a JSON array of DecideRequests, one object each: job, tick, cursor (null:
--   none expected), from, fire (ticks, oldest first), missed ([[first, last, count]]),
--   owner ("<node>:<nonce>"), overlap, lease_ttl_ms, claim_ttl_ms, known_fence,
--   trigger_window_ms, trigger_id (null for a tick), history (0: 1000 kept).
--   One row per request, i its 0-based index; reply is its DecideReply:
--   {answer, cursor, verdict, fence, fences, ticks, hold_ms, data_lost, replayed, renewed,
--   records (RunRecord JSON, what the decision appended)}; a reply other than `decided`
--   carries answer and cursor only; warnings: garbage moved aside first (scrub, runs.sql).
--   Each request is decided atomically under its job row's lock by decide_one(p_ns,
--   request) (the row made if missing, scrubbed, then decide_job), through each_request.
--
-- each_request(p_ns, p_requests, p_function) -> TABLE (i integer, reply jsonb)
--   p_function(p_ns, request) (decide_one or end_run: called, not EXECUTEd, which costs
--   a plan per request) for each request of the JSON array, in job order (two
--   batches lock their rows in one order and never deadlock), each in a subtransaction:
--   one that fails answers {error, sqlstate}, its writes undone, the others' kept. A row
--   another session holds costs that job only, as in acquire_many (batches.sql): a first
--   pass waits 20 ms for each row, a second 500 ms for those put aside, then 55P03.
--
-- The state is the job's row (cursor_tick, origin_tick, fence, the lease and its ticks,
-- the run mirror, pending, paused, hold_until_us, outstanding triggers), its claims and
-- its records (runs). Times: now_us() is the reference's now_us, now_us() / 1000 its
-- now_ms; every expiry it writes is a whole millisecond, in microseconds.
--
-- record_json(...) -> jsonb, records_of(...) -> jsonb: run records (model/records.py) of
--   one tick, or of each tick of an array, as decisions write them (finished_ms: now).
-- append_records(p_ns, p_job, p_records, p_history, p_now_us) -> void: append a JSON
--   array of records in order; keep the job's newest p_history (0: 1000).
--
-- post_trigger(p_ns, p_job, p_id) -> text
--   An operator's manual trigger: outstanding (jobs.outstanding, [id, posted_ms]) until a
--   decision takes it or sweeps it; its control notice posted (post_control, control.sql)
--   in the same transaction. Returns the notice's id.

CREATE OR REPLACE FUNCTION @schema@.record_json(
  p_job text, p_tick bigint, p_outcome text, p_node text, p_fence bigint, p_trigger text,
  p_now_ms bigint, p_count bigint DEFAULT 1, p_last bigint DEFAULT 0
) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  -- PL/pgSQL, not SQL: called from PL/pgSQL, a SQL function is planned at every call.
  RETURN jsonb_build_object('job', p_job, 'tick_s', p_tick, 'node', p_node,
    'outcome', p_outcome, 'fence', p_fence, 'started_ms', 0, 'finished_ms', p_now_ms,
    'error', NULL, 'count', p_count, 'trigger_id', p_trigger, 'detail', NULL,
    'last_tick_s', p_last);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.records_of(
  p_job text, p_ticks bigint[], p_outcome text, p_node text, p_fence bigint, p_trigger text,
  p_now_ms bigint
) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  t bigint;
  out jsonb := '[]';
BEGIN
  FOREACH t IN ARRAY coalesce(p_ticks, '{}') LOOP
    out := out || @schema@.record_json(p_job, t, p_outcome, p_node, p_fence, p_trigger, p_now_ms);
  END LOOP;
  RETURN out;
END
$$;

CREATE OR REPLACE FUNCTION @schema@.append_records(
  p_ns text, p_job text, p_records jsonb, p_history integer, p_now_us bigint
) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  oldest bigint;
BEGIN
  IF jsonb_array_length(p_records) = 0 THEN
    RETURN;
  END IF;
  INSERT INTO @schema@.runs (ns, job, written_ms, record)
  SELECT p_ns, p_job, p_now_us / 1000, e
  FROM jsonb_array_elements(p_records) WITH ORDINALITY AS x (e, o) ORDER BY o;
  -- What the operator's status counts (`cronrace status`): not part of the protocol. Most
  -- records (granted, a run's result) count nothing: the row is not written again for them.
  IF p_records @? '$[*] ? (@.outcome == "skipped:overlap" || @.outcome == "skipped:paused"
                           || @.outcome == "missed" || @.outcome == "queued"
                           || @.outcome == "abandoned")' THEN
  UPDATE @schema@.jobs AS jb SET
    skipped_overlap = coalesce(jb.skipped_overlap, 0) + c.overlap,
    skipped_paused = coalesce(jb.skipped_paused, 0) + c.paused,
    missed = coalesce(jb.missed, 0) + c.missed,
    queued = coalesce(jb.queued, 0) + c.queued,
    abandoned = coalesce(jb.abandoned, 0) + c.abandoned
  FROM (
    SELECT count(*) FILTER (WHERE e->>'outcome' = 'skipped:overlap') AS overlap,
           count(*) FILTER (WHERE e->>'outcome' = 'skipped:paused') AS paused,
           coalesce(sum((e->>'count')::bigint) FILTER (WHERE e->>'outcome' = 'missed'), 0)
             AS missed,
           count(*) FILTER (WHERE e->>'outcome' = 'queued') AS queued,
           count(*) FILTER (WHERE e->>'outcome' = 'abandoned') AS abandoned
    FROM jsonb_array_elements(p_records) AS x (e)
  ) c
  WHERE jb.ns = p_ns AND jb.job = p_job;
  END IF;
  SELECT id INTO oldest FROM @schema@.runs WHERE ns = p_ns AND job = p_job
  ORDER BY id DESC OFFSET CASE WHEN p_history > 0 THEN p_history ELSE 1000 END LIMIT 1;
  IF oldest IS NOT NULL THEN
    DELETE FROM @schema@.runs WHERE ns = p_ns AND job = p_job AND id <= oldest;
  END IF;
END
$$;

CREATE OR REPLACE FUNCTION @schema@.post_trigger(p_ns text, p_job text, p_id text)
RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  INSERT INTO @schema@.jobs (ns, job) VALUES (p_ns, p_job) ON CONFLICT DO NOTHING;
  UPDATE @schema@.jobs
  SET outstanding = outstanding || jsonb_build_array(jsonb_build_array(p_id, @schema@.now_us() / 1000))
  WHERE ns = p_ns AND job = p_job;
  RETURN @schema@.post_control(p_ns, jsonb_build_object('op', 'trigger', 'job', p_job, 'id', p_id));
END
$$;

CREATE OR REPLACE FUNCTION @schema@.decide_one(p_ns text, r jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  warnings text;
  t_us bigint := @schema@.now_us();
  garbage text;
BEGIN
  warnings := @schema@.scrub(p_ns, r->>'job', t_us, (r->>'lease_ttl_ms')::bigint, true);
  -- A remembered answer no decide() wrote: moved aside, the claim with it.
  DELETE FROM @schema@.claims
  WHERE ns = p_ns AND job = r->>'job' AND trigger_id = coalesce(r->>'trigger_id', '')
    AND tick = CASE WHEN nullif(r->>'trigger_id', '') IS NULL THEN (r->>'tick')::bigint ELSE 0 END
    AND memo IS NOT NULL AND NOT (jsonb_typeof(memo) = 'object' AND memo ? 'answer')
  RETURNING memo::text INTO garbage;
  IF FOUND THEN
    warnings := concat_ws(',', nullif(warnings, ''),
                          @schema@.quarantine(p_ns, r->>'job', 'claim', garbage, t_us));
  END IF;
  RETURN @schema@.decide_job(p_ns, r) || jsonb_build_object('warnings', warnings);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.decide_job(p_ns text, r jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  j @schema@.jobs%ROWTYPE;
  c record;
  nf record;
  t_us bigint := @schema@.now_us();
  t_ms bigint := t_us / 1000;
  v_job text := r->>'job';
  v_tick bigint := (r->>'tick')::bigint;
  v_owner text := r->>'owner';
  v_node text := split_part(r->>'owner', ':', 1);
  v_overlap text := r->>'overlap';
  v_ttl bigint := (r->>'lease_ttl_ms')::bigint;
  v_known bigint := coalesce((r->>'known_fence')::bigint, 0);
  v_window bigint := coalesce((r->>'trigger_window_ms')::bigint, 0);
  v_trigger text := nullif(r->>'trigger_id', '');
  v_fire bigint[] := ARRAY(SELECT jsonb_array_elements_text(r->'fire')::bigint);
  v_n integer := cardinality(v_fire);
  v_key bigint := CASE WHEN v_trigger IS NULL THEN v_tick ELSE 0 END;
  live boolean;
  renewed boolean := false;
  recs jsonb := '[]';
  verdict text := 'nothing';
  fences bigint[] := '{}';
  hold_ms bigint := 0;
  lost boolean := false;
  reply jsonb;
BEGIN
  SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = v_job FOR UPDATE;
  SELECT cl.owner, cl.memo INTO c FROM @schema@.claims cl
  WHERE cl.ns = p_ns AND cl.job = v_job AND cl.tick = v_key
    AND cl.trigger_id = coalesce(v_trigger, '') AND cl.expires_us > t_us;
  live := j.lease_fence IS NOT NULL AND j.lease_expires_us > t_us;

  -- A retry of a decision made under this claim: its answer again. A grant may start only
  -- while its lease holds its fence and no higher fence is known (renewed, extended now).
  IF c.owner = v_owner AND c.memo IS NOT NULL THEN
    renewed := c.memo->>'verdict' = 'run' AND (v_overlap = 'allow' OR (live
      AND j.lease_fence = (c.memo->>'fence')::bigint
      AND greatest(coalesce(j.fence, 0), v_known) <= (c.memo->>'fence')::bigint));
    UPDATE @schema@.jobs SET lease_expires_us = (t_ms + v_ttl) * 1000
    WHERE ns = p_ns AND job = v_job AND renewed AND v_overlap <> 'allow';
    RETURN c.memo || jsonb_build_object('replayed', true, 'renewed', renewed, 'records', '[]'::jsonb);
  END IF;
  IF v_trigger IS NULL AND j.cursor_tick >= v_tick THEN
    RETURN jsonb_build_object('answer', 'covered', 'cursor', j.cursor_tick);
  END IF;
  IF c.owner IS DISTINCT FROM v_owner AND c.owner IS NOT NULL THEN
    RETURN jsonb_build_object('answer', 'lost', 'cursor', j.cursor_tick);
  END IF;
  IF v_trigger IS NOT NULL THEN
    IF NOT EXISTS (SELECT FROM jsonb_array_elements(j.outstanding) e WHERE e->>0 = v_trigger) THEN
      RETURN jsonb_build_object('answer', 'stale', 'cursor', j.cursor_tick);
    END IF;
    j.outstanding := (SELECT coalesce(jsonb_agg(e ORDER BY o), '[]')
                      FROM jsonb_array_elements(j.outstanding) WITH ORDINALITY AS x (e, o)
                      WHERE e->>0 <> v_trigger);
  ELSIF j.cursor_tick IS DISTINCT FROM (r->>'cursor')::bigint THEN
    IF j.cursor_tick IS NOT NULL OR r->>'cursor' IS NULL THEN
      RETURN jsonb_build_object('answer', 'moved', 'cursor', j.cursor_tick);
    END IF;
    -- No cursor where the caller saw one: the database lost the job's rows. Recorded, runs
    -- granted before may be alive (the hold), and the decision goes on from the caller's.
    lost := true;
    recs := jsonb_build_array(@schema@.record_json(v_job, (r->>'cursor')::bigint, 'data_lost',
      v_node, 0, NULL, t_ms, 1, (r->>'cursor')::bigint));
    j := @schema@.start_hold(j, t_us, t_ms + v_ttl, greatest(coalesce(j.fence, 0),
      CASE WHEN live THEN j.lease_fence ELSE 0 END, v_known, t_us));
  END IF;

  -- What ran out: a run whose lease expired unreleased (every tick it still had), the tick
  -- queued behind it, triggers outstanding longer than their window.
  IF NOT live THEN
    IF j.run_fence IS NOT NULL THEN
      recs := recs || @schema@.records_of(v_job, j.run_ticks, 'abandoned',
        split_part(j.run_owner, ':', 1), j.run_fence, j.run_trigger, t_ms);
    END IF;
    IF j.pending_tick IS NOT NULL THEN
      recs := recs || @schema@.record_json(v_job, j.pending_tick, 'abandoned', v_node, 0,
                                           j.pending_trigger, t_ms);
    END IF;
    j.lease_owner := NULL; j.lease_fence := NULL; j.lease_ticks := NULL;
    j.lease_trigger := NULL; j.lease_expires_us := NULL; j.lease_held := false;
    j.lease_reasserted := false; j.lease_started_ms := NULL; j.run_owner := NULL; j.run_fence := NULL;
    j.run_ticks := NULL; j.run_trigger := NULL; j.pending_tick := NULL;
    j.pending_trigger := NULL;
  END IF;
  IF v_window > 0 THEN
    recs := recs || (
      SELECT coalesce(jsonb_agg(@schema@.record_json(v_job, (e->>1)::bigint / 1000, 'missed',
                      v_node, 0, e->>0, t_ms) ORDER BY o), '[]')
      FROM jsonb_array_elements(j.outstanding) WITH ORDINALITY AS x (e, o)
      WHERE (e->>1)::bigint + v_window <= t_ms);
    j.outstanding := (SELECT coalesce(jsonb_agg(e ORDER BY o), '[]')
                      FROM jsonb_array_elements(j.outstanding) WITH ORDINALITY AS x (e, o)
                      WHERE (e->>1)::bigint + v_window > t_ms);
  END IF;
  recs := recs || (
    SELECT coalesce(jsonb_agg(@schema@.record_json(v_job, (m->>0)::bigint, 'missed', v_node, 0,
                    NULL, t_ms, (m->>2)::bigint, (m->>1)::bigint) ORDER BY o), '[]')
    FROM jsonb_array_elements(r->'missed') WITH ORDINALITY AS x (m, o));

  -- The ticks it fires: the pause flag, then the overlap policy.
  <<fire>>
  BEGIN
    EXIT fire WHEN v_n = 0;
    IF j.paused THEN
      verdict := 'skipped:paused';
      recs := recs || @schema@.records_of(v_job, v_fire, verdict, v_node, 0, v_trigger, t_ms);
      EXIT fire;
    END IF;
    IF v_overlap = 'allow' THEN  -- a fence per tick, no lease
      FOR k IN 1 .. v_n LOOP
        SELECT * INTO nf FROM @schema@.next_fence(
          j.fence, CASE WHEN live THEN j.lease_fence END, v_known, t_us);
        j.fence := nf.fence;
        lost := lost OR nf.lost;
        IF nf.lost THEN j := @schema@.start_hold(j, t_us, t_ms + v_ttl, nf.fence - 1); END IF;
        fences := fences || nf.fence;
        recs := recs || @schema@.record_json(v_job, v_fire[k], 'granted', v_node, nf.fence,
                                             v_trigger, t_ms);
      END LOOP;
      verdict := 'run';
      hold_ms := greatest(0, coalesce(j.hold_until_us, 0) / 1000 - t_ms);
      EXIT fire;
    END IF;
    IF live THEN
      IF v_overlap = 'skip' THEN
        verdict := 'skipped:overlap';
        recs := recs || @schema@.records_of(v_job, v_fire, verdict, v_node, 0, v_trigger, t_ms);
        EXIT fire;
      ELSIF v_overlap = 'queue_one' THEN
        -- At most one waits, the newest: the one it displaces, and the older ticks of this
        -- decision, are skipped.
        IF j.pending_tick IS NOT NULL THEN
          recs := recs || @schema@.record_json(v_job, j.pending_tick, 'skipped:overlap', v_node,
                                               0, j.pending_trigger, t_ms);
        END IF;
        recs := recs
          || @schema@.records_of(v_job, v_fire[1 : v_n - 1], 'skipped:overlap', v_node, 0, NULL, t_ms)
          || @schema@.record_json(v_job, v_fire[v_n], 'queued', v_node, 0, v_trigger, t_ms);
        j.pending_tick := v_fire[v_n];
        j.pending_trigger := v_trigger;
        verdict := 'queued';
        EXIT fire;
      ELSIF j.run_fence IS NOT NULL THEN  -- replace: the old run loses its lease
        recs := recs || @schema@.records_of(v_job, j.run_ticks, 'lease_lost',
          split_part(j.run_owner, ':', 1), j.run_fence, j.run_trigger, t_ms);
      END IF;
    END IF;
    SELECT * INTO nf FROM @schema@.next_fence(
      j.fence, CASE WHEN live THEN j.lease_fence END, v_known, t_us);
    j.fence := nf.fence;
    lost := lost OR nf.lost;
    IF nf.lost THEN j := @schema@.start_hold(j, t_us, t_ms + v_ttl, nf.fence - 1); END IF;
    hold_ms := greatest(0, coalesce(j.hold_until_us, 0) / 1000 - t_ms);
    j.lease_owner := v_owner; j.lease_fence := nf.fence; j.lease_ticks := v_fire;
    j.lease_trigger := v_trigger; j.lease_expires_us := (t_ms + v_ttl) * 1000;
    j.lease_held := hold_ms > 0 AND v_overlap <> 'replace'; j.lease_reasserted := false;
    j.lease_started_ms := t_ms; j.run_owner := v_owner; j.run_fence := nf.fence;
    j.run_ticks := v_fire; j.run_trigger := v_trigger;
    recs := recs || @schema@.records_of(v_job, v_fire, 'granted', v_node, nf.fence, v_trigger, t_ms);
    verdict := 'run';
    fences := ARRAY[nf.fence];
  END fire;

  IF v_trigger IS NULL THEN
    j.origin_tick := CASE WHEN j.cursor_tick IS NULL THEN (r->>'from')::bigint
                          ELSE j.origin_tick END;
    j.cursor_tick := v_tick;
  END IF;
  UPDATE @schema@.jobs SET cursor_tick = j.cursor_tick, origin_tick = j.origin_tick,
    fence = j.fence, hold_until_us = j.hold_until_us, hold_fence = j.hold_fence,
    outstanding = j.outstanding,
    lease_owner = j.lease_owner, lease_fence = j.lease_fence, lease_ticks = j.lease_ticks,
    lease_tick = j.lease_ticks[1], lease_trigger = j.lease_trigger,
    lease_expires_us = j.lease_expires_us, lease_held = j.lease_held,
    lease_reasserted = j.lease_reasserted, lease_started_ms = j.lease_started_ms,
    run_owner = j.run_owner, run_fence = j.run_fence, run_ticks = j.run_ticks,
    run_tick = j.run_ticks[1], run_trigger = j.run_trigger,
    pending_tick = j.pending_tick, pending_trigger = j.pending_trigger
  WHERE ns = p_ns AND job = v_job;
  reply := jsonb_build_object('answer', 'decided', 'cursor', j.cursor_tick, 'verdict', verdict,
    'fence', coalesce(fences[1], 0),
    'fences', CASE WHEN v_overlap = 'allow' THEN to_jsonb(fences) ELSE '[]' END,
    'ticks', to_jsonb(CASE WHEN verdict = 'run' THEN v_fire ELSE '{}' END), 'hold_ms', hold_ms,
    'data_lost', lost);
  -- The answer is kept under the claim for its retries.
  INSERT INTO @schema@.claims AS cl (ns, job, tick, trigger_id, owner, expires_us, request_id,
                                     memo)
  VALUES (p_ns, v_job, v_key, coalesce(v_trigger, ''), v_owner,
          (t_ms + (r->>'claim_ttl_ms')::bigint) * 1000, 'decide', reply)
  ON CONFLICT (ns, job, tick, trigger_id) DO UPDATE SET owner = EXCLUDED.owner,
    expires_us = EXCLUDED.expires_us, request_id = EXCLUDED.request_id, memo = EXCLUDED.memo;
  PERFORM @schema@.append_records(p_ns, v_job, recs,
                                  coalesce((r->>'history')::integer, 0), t_us);
  RETURN reply || jsonb_build_object('replayed', false, 'renewed', false, 'records', recs);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.each_request(p_ns text, p_requests jsonb, p_function text)
RETURNS TABLE (i integer, reply jsonb)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  r record;
  locked integer[] := '{}';
  pass integer;
BEGIN
  FOR pass IN 1..2 LOOP
    EXIT WHEN pass = 2 AND cardinality(locked) = 0;
    PERFORM @schema@.lock_wait(CASE pass WHEN 1 THEN 20 ELSE 500 END);
    FOR r IN
      SELECT (e.ord - 1)::integer AS ord, e.req
      FROM jsonb_array_elements(p_requests) WITH ORDINALITY AS e (req, ord)
      ORDER BY e.req->>'job', e.ord
    LOOP
      CONTINUE WHEN pass = 2 AND NOT r.ord = ANY (locked);
      i := r.ord;
      BEGIN
        reply := CASE p_function WHEN 'decide_one' THEN @schema@.decide_one(p_ns, r.req)
                                 ELSE @schema@.end_run(p_ns, r.req) END;
      EXCEPTION
        WHEN lock_not_available THEN
          IF pass = 1 THEN
            locked := locked || r.ord;
            CONTINUE;
          END IF;
          reply := jsonb_build_object('error', SQLERRM, 'sqlstate', SQLSTATE);
        WHEN others THEN
          reply := jsonb_build_object('error', SQLERRM, 'sqlstate', SQLSTATE);
      END;
      RETURN NEXT;
    END LOOP;
  END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION @schema@.decide(p_ns text, p_requests jsonb)
RETURNS TABLE (i integer, reply jsonb)
LANGUAGE sql VOLATILE AS $$
  SELECT * FROM @schema@.each_request(p_ns, p_requests, 'decide_one')
$$;
