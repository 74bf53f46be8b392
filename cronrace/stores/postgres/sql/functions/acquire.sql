-- acquire.sql: decide a won tick (or a manual trigger) against the watermark and the lease.
-- The PostgreSQL form of the Redis store's acquire.lua: the same inputs, the same answers.
--
-- acquire(p_ns, p_job, p_decide_tick, p_mark_tick, p_run_tick, p_owner, p_ttl_ms,
--         p_overlap, p_mode, p_request_id, p_known_fence, p_trigger_id, p_prior_tick,
--         p_late_ok, p_keep_ms, p_first_tick) -> jsonb
--
-- Inputs:
--   p_decide_tick  refused as stale when <= watermark (ignored for triggers)
--   p_mark_tick    the watermark to set (>= decide_tick)
--   p_run_tick     the tick the run is for (written in the lease)
--   p_owner        "<node_id>:<nonce>"
--   p_ttl_ms       the lease's time to live
--   p_overlap      skip | queue_one | replace | allow
--   p_mode         run | mark (decide, run nothing) | trigger (leave the watermark alone)
--   p_request_id   names this decision for retries ("<mode>:<tick>", "trigger:<id>");
--                  '' when the caller never retries it (nothing is remembered)
--   p_known_fence  the highest fence the caller has seen for this job (0: none)
--   p_trigger_id   the manual trigger decided ('' for a tick): its claim is (tick 0, id);
--                  a trigger that has to wait (queue_one) stays one, as pending_trigger
--   p_prior_tick   the tick before those this decision covers (0: none). Deciding past it
--                  while its claim is won but undecided notes it in jobs.passed: no one
--                  else will decide it, so its winner still may, late. The ticks between
--                  the watermark and it are noted too (jobs.passed_ranges, as acquire.lua's
--                  state.passed_ranges): this caller raced them and left them to their
--                  winners, whose decisions may be on the way in any order
--   p_late_ok      a passed tick decided late runs (catchup = all), under the overlap
--                  policy; otherwise (and always in mode mark) it is answered 'missed'
--   p_keep_ms      the answer remembered under the claim is kept at least this long from
--                  now (0: as long as the claim lives), in a claim row made anew if it had
--                  run out: a retry after a lost answer reads it back (as acquire.lua)
--   p_first_tick   the oldest tick the decision covers (its backlog's; 0: p_run_tick): a
--                  passed tick decided late takes its backlog out of the passed range from
--                  there (as acquire.lua)
--
-- Reply: a JSON object {decision, fence, prev_watermark, holder_fence, holder_owner,
--   abandoned_tick, abandoned_fence, abandoned_owner, warnings, superseded_tick, hold_ms,
--   data_lost, superseded_trigger, late_from, replayed, renewed}, each as acquire.lua
--   answers it:
--   decision: run | stale | marked | skipped:paused | skipped:overlap | queued | missed
--   prev_watermark: -1 when there was none; holder_*: the live lease met (0 / '')
--   abandoned_*: a run whose lease expired without release (0 / '')
--   warnings: garbage moved to the quarantine table, "kind|where|quarantine" items
--   superseded_tick / superseded_trigger: a queued tick (trigger) dropped by this decision
--   hold_ms: a granted run must wait this long before its handler starts (the wipe hold)
--   data_lost: this call found the job's fence counter lost (and started the hold)
--   late_from: a passed tick decided late and run (late_ok): the oldest tick of its
--     backlog (p_first_tick up to it) taken with it out of the passed range below it (the
--     decision that passed them left them to this claim's holder); 0 otherwise
--   replayed: the remembered answer of an earlier call with this owner and request_id
--   renewed: a replayed run's lease still held its fence and was extended by this call;
--     never when the job's counter or the caller knows a fence above the replayed one (a
--     failover to a lagging replica put back a grant that others followed)
--   A claim another owner holds now (taken over from this one: take_over.sql) is answered
--   'stale' and decides nothing; so is a manual trigger already decided (its id among
--   jobs.triggers, the job's last 16).
--
-- Atomic: the job's row is locked first (every decision, renewal and release of the job
-- waits for it), and the function runs in its caller's one transaction.

CREATE OR REPLACE FUNCTION @schema@.acquire(
  p_ns text, p_job text, p_decide_tick bigint, p_mark_tick bigint, p_run_tick bigint,
  p_owner text, p_ttl_ms bigint, p_overlap text, p_mode text, p_request_id text,
  p_known_fence bigint, p_trigger_id text, p_prior_tick bigint, p_late_ok boolean,
  p_keep_ms bigint DEFAULT 0, p_first_tick bigint DEFAULT 0
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  j @schema@.jobs%ROWTYPE;
  c record;
  t_now bigint := @schema@.now_us();
  v_mode text := p_mode;
  claim_tick bigint := CASE WHEN p_trigger_id <> '' THEN 0 ELSE p_decide_tick END;
  prev bigint := -1;
  holder_fence bigint := 0;
  holder_owner text := '';
  ab_tick bigint := 0;
  ab_fence bigint := 0;
  ab_owner text := '';
  superseded bigint := 0;
  superseded_trigger text := '';
  hold_ms bigint := 0;
  data_lost boolean := false;
  warnings text[] := '{}';
  fence_garbled boolean := false;
  remember boolean := false;
  expired boolean := false;
  revive boolean := false;
  redecided boolean := false;
  late boolean := false;
  behind boolean := false;
  alive boolean;
  decision text;
  v_fence bigint := 0;
  take_lease boolean := false;
  nf record;
  renewed boolean;
  taken boolean := false;
  reply jsonb;
  ranges bigint[];
  k integer;
  in_range boolean := false;
  late_from bigint := 0;
  lo bigint;
  first_tick bigint := CASE WHEN p_first_tick <= 0 OR p_first_tick > p_run_tick
                            THEN p_run_tick ELSE p_first_tick END;
BEGIN
  INSERT INTO @schema@.jobs (ns, job) VALUES (p_ns, p_job) ON CONFLICT DO NOTHING;
  SELECT * INTO j FROM @schema@.jobs WHERE ns = p_ns AND job = p_job FOR UPDATE;

  -- Garbage (an operator's edit): moved aside and reported, before anything is decided.
  IF @schema@.lease_garbled(j) THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'lease',
      concat_ws(' ', j.lease_owner, j.lease_fence, j.lease_tick, j.lease_expires_us), t_now);
    j.lease_owner := NULL; j.lease_fence := NULL; j.lease_tick := NULL;
    j.lease_started_ms := NULL; j.lease_expires_us := NULL;
    -- Whether a run held the garbled lease is unknown: hold as after a wipe.
    IF coalesce(j.hold_until_us, 0) < t_now + p_ttl_ms * 1000 THEN
      j.hold_until_us := t_now + p_ttl_ms * 1000;
    END IF;
  END IF;
  IF j.fence IS NOT NULL AND j.fence <= 0 THEN
    -- Re-seeded like a lost counter, but no sign of lost data.
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'fence', j.fence::text, t_now);
    j.fence := NULL;
    fence_garbled := true;
  END IF;
  IF j.watermark < 0 THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'watermark', j.watermark::text, t_now);
    j.watermark := NULL;
  END IF;
  IF j.run_fence <= 0 OR j.run_tick < 0 THEN
    -- The run a lease was granted to, garbled: no run had that fence (it is no abandoned run).
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'run_fence',
      concat_ws(' ', j.run_owner, j.run_fence, j.run_tick), t_now);
    j.run_fence := NULL; j.run_tick := NULL; j.run_owner := NULL;
  END IF;
  IF j.pending_tick < 0 THEN
    warnings := warnings || @schema@.quarantine(p_ns, p_job, 'pending', j.pending_tick::text, t_now);
    j.pending_tick := NULL;
    j.pending_trigger := NULL;
  END IF;
  alive := j.lease_fence IS NOT NULL AND j.lease_expires_us > t_now;

  -- A retry of a decision already made (its answer was lost) gets that answer again.
  IF p_request_id <> '' THEN
    SELECT cl.owner, cl.request_id, cl.memo, cl.expires_us INTO c FROM @schema@.claims cl
    WHERE cl.ns = p_ns AND cl.job = p_job AND cl.tick = claim_tick
      AND cl.trigger_id = p_trigger_id;
    IF FOUND AND c.expires_us <= t_now THEN
      -- Run out and not yet swept: gone, its answer with it (as a Redis key expires).
      expired := true;
    ELSIF FOUND AND c.owner = p_owner THEN
      remember := c.memo IS NULL;
      IF c.memo IS NOT NULL AND c.request_id = p_request_id THEN
        IF c.memo->>'decision' <> 'run' OR p_overlap = 'allow' OR alive THEN
          -- A granted run whose lease still holds its fence may start now: extend the
          -- lease from now. Held by another fence, it lost its lease before it could start.
          -- Nor after fences above it: a lagging failover may have put its lease back.
          renewed := c.memo->>'decision' = 'run' AND alive
                     AND j.lease_fence = (c.memo->>'fence')::bigint
                     AND greatest(coalesce(j.fence, 0), p_known_fence)
                         <= (c.memo->>'fence')::bigint;
          IF renewed THEN
            j.lease_expires_us := t_now + p_ttl_ms * 1000;
          END IF;
          UPDATE @schema@.jobs SET
            lease_owner = j.lease_owner, lease_fence = j.lease_fence, lease_tick = j.lease_tick,
            lease_started_ms = j.lease_started_ms, lease_expires_us = j.lease_expires_us,
            fence = j.fence, watermark = j.watermark, pending_tick = j.pending_tick,
            pending_trigger = j.pending_trigger, hold_until_us = j.hold_until_us,
            run_fence = j.run_fence, run_tick = j.run_tick, run_owner = j.run_owner
          WHERE ns = p_ns AND job = p_job;
          RETURN c.memo || jsonb_build_object('replayed', true, 'renewed', renewed);
        END IF;
        -- The grant's lease ran out before its answer came back, so its run never
        -- started: decide the tick again, late, under the overlap policy (the watermark
        -- already counts it). The first fence is reported abandoned; this answer
        -- replaces the memo.
        v_mode := 'trigger';
        prev := (c.memo->>'prev_watermark')::bigint;
        remember := true;
        redecided := true;
      END IF;
    ELSIF FOUND THEN
      -- Another owner holds the claim: a live node took it over (take_over.sql) while
      -- this one was frozen or cut off. The tick is the taker's to decide.
      taken := true;
    ELSE
      expired := true;  -- no claim: see a passed tick below
    END IF;
    -- The claim ran out before this decision: its answer is kept in a claim made anew.
    revive := expired AND p_keep_ms > 0;
  END IF;

  <<decide>>
  BEGIN
    IF taken THEN
      prev := coalesce(j.watermark, -1);
      decision := 'stale';
      EXIT decide;
    END IF;
    -- A manual trigger is decided once: its id is kept among the job's last 16 decided,
    -- and one among them is stale (its claim may have run out, and a node paused between
    -- reading it and claiming it won the claim anew: as acquire.lua).
    IF p_trigger_id <> '' THEN
      IF p_trigger_id = ANY (j.triggers) AND NOT redecided THEN
        decision := 'stale';
        EXIT decide;
      END IF;
      j.triggers := array_remove(j.triggers, p_trigger_id) || p_trigger_id;
      j.triggers := j.triggers[greatest(1, cardinality(j.triggers) - 15) :];
    END IF;
    IF v_mode <> 'trigger' THEN
      prev := coalesce(j.watermark, -1);
      IF prev >= p_decide_tick THEN
        -- A later tick was decided first. Stale, unless that decision passed this tick
        -- while this owner's claim on it was undecided: then no one else decided it, and
        -- no one else can (the claim is ours), so it is decided now, late.
        -- Ranges of passed ticks are pairs (lo, hi]: lo < tick <= hi, newest last.
        -- A claim gone (its winner frozen past the claim's lifetime, which outlasts the
        -- catch-up window) no longer proves whose the tick was; but the decision that
        -- passed it left it to its winner alone, and only a winner decides a tick it did
        -- not lose: answered missed, too late for any catch-up, once.
        IF v_mode IN ('run', 'mark') AND (remember OR expired)
           AND NOT p_decide_tick = ANY (j.passed) THEN
          FOR k IN 1 .. coalesce(array_length(j.passed_ranges, 1), 0) / 2 LOOP
            IF j.passed_ranges[2 * k - 1] < p_decide_tick
               AND p_decide_tick <= j.passed_ranges[2 * k] THEN
              -- Taken out: the range is split around it, empty halves dropped.
              ranges := j.passed_ranges[1 : 2 * k - 2];
              IF j.passed_ranges[2 * k - 1] < p_decide_tick - 1 THEN
                ranges := ranges || ARRAY[j.passed_ranges[2 * k - 1], p_decide_tick - 1];
              END IF;
              IF p_decide_tick < j.passed_ranges[2 * k] THEN
                ranges := ranges || ARRAY[p_decide_tick, j.passed_ranges[2 * k]];
              END IF;
              j.passed_ranges := ranges || j.passed_ranges[2 * k + 1 :];
              in_range := true;
              EXIT;
            END IF;
          END LOOP;
        END IF;
        IF NOT (v_mode IN ('run', 'mark') AND (remember OR expired)
                AND (p_decide_tick = ANY (j.passed) OR in_range))
        THEN
          decision := 'stale';
          EXIT decide;
        END IF;
        j.passed := array_remove(j.passed, p_decide_tick);
        -- Its backlog's older ticks in the passed range just below it were left to this
        -- claim too: decided with it (run, or counted missed from late_from), taken out of
        -- the range (no later decision runs them).
        late_from := p_decide_tick;
        IF first_tick < p_decide_tick THEN
          FOR k IN 1 .. coalesce(array_length(j.passed_ranges, 1), 0) / 2 LOOP
            IF j.passed_ranges[2 * k - 1] < p_decide_tick - 1
               AND p_decide_tick - 1 <= j.passed_ranges[2 * k] THEN
              lo := greatest(first_tick - 1, j.passed_ranges[2 * k - 1]);
              ranges := j.passed_ranges[1 : 2 * k - 2];
              IF j.passed_ranges[2 * k - 1] < lo THEN
                ranges := ranges || ARRAY[j.passed_ranges[2 * k - 1], lo];
              END IF;
              IF p_decide_tick - 1 < j.passed_ranges[2 * k] THEN
                ranges := ranges || ARRAY[p_decide_tick - 1, j.passed_ranges[2 * k]];
              END IF;
              j.passed_ranges := ranges || j.passed_ranges[2 * k + 1 :];
              late_from := lo + 1;
              EXIT;
            END IF;
          END LOOP;
        END IF;
        IF NOT p_late_ok OR v_mode = 'mark' OR expired THEN
          decision := 'missed';
          EXIT decide;
        END IF;
        late := true;
        v_mode := 'trigger';  -- decided like a trigger: the watermark stays where it is
        -- The run is for the oldest tick this decision took and fires, not the plan's
        -- first: older ticks of the plan were another decision's (queued, run or recorded
        -- there), or are counted missed by the caller (beyond max_catchup).
        p_run_tick := greatest(p_run_tick, late_from);
      ELSE
        -- The claim of the tick before this decision's is won and undecided, or gone (run
        -- out and swept before this decision came: its holder frozen past its lifetime),
        -- yet above the watermark, so no decision took it: note it. Without a watermark
        -- (a new or wiped schema) a gone claim shows nothing (acquire.lua alike).
        IF p_prior_tick > prev AND p_prior_tick < p_decide_tick AND (EXISTS (
          SELECT 1 FROM @schema@.claims cl
          WHERE cl.ns = p_ns AND cl.job = p_job AND cl.tick = p_prior_tick
            AND cl.trigger_id = '' AND cl.memo IS NULL
        ) OR (prev >= 0 AND NOT EXISTS (
          SELECT 1 FROM @schema@.claims cl
          WHERE cl.ns = p_ns AND cl.job = p_job AND cl.tick = p_prior_tick
            AND cl.trigger_id = '' AND cl.expires_us > t_now
        ))) THEN
          j.passed := j.passed || p_prior_tick;
          IF cardinality(j.passed) > 16 THEN
            j.passed := j.passed[cardinality(j.passed) - 15:];
          END IF;
        END IF;
        -- Every tick between the watermark and that one: left to whoever holds its claim.
        -- With no tick before known (a claim taken over, a first decision), every tick
        -- between the watermark and the oldest this decision covers (as acquire.lua).
        IF prev >= 0 AND p_prior_tick > prev AND p_prior_tick < p_decide_tick
           AND p_prior_tick - prev > 1 THEN
          j.passed_ranges := j.passed_ranges || ARRAY[prev, p_prior_tick - 1];
        ELSIF p_prior_tick = 0 AND prev >= 0 AND first_tick - prev > 1
              AND first_tick <= p_decide_tick THEN
          j.passed_ranges := j.passed_ranges || ARRAY[prev, first_tick - 1];
        END IF;
        IF cardinality(j.passed_ranges) > 32 THEN  -- the newest 16 ranges
          j.passed_ranges := j.passed_ranges[cardinality(j.passed_ranges) - 31:];
        END IF;
        j.watermark := p_mark_tick;
        IF v_mode = 'mark' THEN
          decision := 'marked';
          EXIT decide;
        END IF;
      END IF;
    END IF;

    -- A scheduled tick decided behind the watermark (passed and decided late, or decided
    -- again because its grant's lease ran out before the answer came back): older than any
    -- tick queued since.
    behind := v_mode = 'trigger' AND p_trigger_id = '';

    IF j.paused THEN
      j.skipped_paused := coalesce(j.skipped_paused, 0) + 1;
      decision := 'skipped:paused';
      EXIT decide;
    END IF;

    IF alive THEN
      holder_fence := j.lease_fence;
      holder_owner := j.lease_owner;
    ELSE
      IF j.run_fence IS NOT NULL THEN
        ab_fence := j.run_fence;
        ab_tick := coalesce(j.run_tick, 0);
        ab_owner := coalesce(j.run_owner, '');
        j.run_fence := NULL; j.run_tick := NULL; j.run_owner := NULL;
        j.abandoned := coalesce(j.abandoned, 0) + 1;
      END IF;
      -- A tick queued behind a run that died is older than this one: this one supersedes it.
      -- Unless this one is an older tick decided late (queue_one): it runs first, and the
      -- newer tick still waits, handed on when this run releases.
      IF j.pending_tick IS NOT NULL
         AND NOT (p_overlap = 'queue_one' AND behind AND j.pending_tick > p_decide_tick) THEN
        superseded := j.pending_tick;
        superseded_trigger := coalesce(j.pending_trigger, '');
        j.pending_tick := NULL;
        j.pending_trigger := NULL;
      END IF;
    END IF;

    IF p_overlap = 'allow' THEN
      decision := 'run';
      EXIT decide;
    END IF;

    IF alive THEN
      IF p_overlap = 'queue_one' THEN
        IF behind AND j.pending_tick > p_decide_tick THEN
          -- An older tick decided late never displaces a newer waiting tick: queue one
          -- keeps the newest (a newer tick overwrites the waiting one, never the reverse).
          j.skipped_overlap := coalesce(j.skipped_overlap, 0) + 1;
          decision := 'skipped:overlap';
          EXIT decide;
        END IF;
        IF j.pending_tick IS NOT NULL THEN
          superseded := j.pending_tick;
          superseded_trigger := coalesce(j.pending_trigger, '');
        END IF;
        -- The newest tick waits, the one this decision is for (a catch-up's claimed tick,
        -- which its record names; the caller records its older ticks skipped): queue one
        -- keeps the newest. A trigger waits as itself (its decide tick is its own).
        j.pending_tick := p_decide_tick;
        -- A waiting trigger must run as that trigger (its id, its record), not as a tick.
        j.pending_trigger := nullif(p_trigger_id, '');
        j.queued := coalesce(j.queued, 0) + 1;
        decision := 'queued';
        EXIT decide;
      ELSIF p_overlap <> 'replace' OR late THEN  -- an older tick never replaces a newer run
        j.skipped_overlap := coalesce(j.skipped_overlap, 0) + 1;
        decision := 'skipped:overlap';
        EXIT decide;
      END IF;
    END IF;

    decision := 'run';
    take_lease := true;
  END decide;

  IF decision = 'run' THEN
    SELECT * INTO nf FROM @schema@.next_fence(j.fence, j.lease_fence, p_known_fence, t_now);
    v_fence := nf.fence;
    j.fence := nf.fence;
    -- A garbled counter is no sign of lost data while a lease guards the job; with no
    -- lease held, a wipe may have taken that lease too (garbage landing after it): hold as
    -- after a wipe, since a run started before may still be alive (as acquire.lua).
    IF (nf.lost AND NOT fence_garbled)
       OR (fence_garbled AND NOT (j.lease_fence IS NOT NULL AND j.lease_expires_us > t_now))
    THEN
      data_lost := nf.lost AND NOT fence_garbled;
      IF coalesce(j.hold_until_us, 0) < t_now + p_ttl_ms * 1000 THEN
        j.hold_until_us := t_now + p_ttl_ms * 1000;
      END IF;
    END IF;
    hold_ms := greatest(0, coalesce(j.hold_until_us, 0) - t_now) / 1000;
    IF take_lease THEN
      j.lease_owner := p_owner;
      j.lease_fence := v_fence;
      j.lease_tick := p_run_tick;
      j.lease_started_ms := t_now / 1000;
      j.lease_expires_us := t_now + p_ttl_ms * 1000;
      j.run_fence := v_fence;
      j.run_tick := p_run_tick;
      j.run_owner := p_owner;
    END IF;
  END IF;
  IF NOT alive AND NOT take_lease THEN
    -- An expired lease is gone, as its Redis key would be.
    j.lease_owner := NULL; j.lease_fence := NULL; j.lease_tick := NULL;
    j.lease_started_ms := NULL; j.lease_expires_us := NULL;
  END IF;

  UPDATE @schema@.jobs SET
    watermark = j.watermark, fence = j.fence,
    lease_owner = j.lease_owner, lease_fence = j.lease_fence, lease_tick = j.lease_tick,
    lease_started_ms = j.lease_started_ms, lease_expires_us = j.lease_expires_us,
    pending_tick = j.pending_tick, pending_trigger = j.pending_trigger,
    run_fence = j.run_fence, run_tick = j.run_tick, run_owner = j.run_owner,
    passed = j.passed, passed_ranges = j.passed_ranges, hold_until_us = j.hold_until_us,
    skipped_overlap = j.skipped_overlap, skipped_paused = j.skipped_paused,
    queued = j.queued, abandoned = j.abandoned, triggers = j.triggers
  WHERE ns = p_ns AND job = p_job;

  IF take_lease THEN
    -- Unstarted until its hold ends: a run alive since before the wipe that re-asserts its
    -- lease takes it back (renew in lease.sql), and this grant must not start.
    UPDATE @schema@.jobs SET lease_held = (hold_ms > 0 AND p_overlap <> 'replace')
    WHERE ns = p_ns AND job = p_job;
  END IF;

  reply := jsonb_build_object(
    'decision', decision, 'fence', v_fence, 'prev_watermark', prev,
    'holder_fence', holder_fence, 'holder_owner', holder_owner,
    'abandoned_tick', ab_tick, 'abandoned_fence', ab_fence, 'abandoned_owner', ab_owner,
    'warnings', array_to_string(warnings, ','), 'superseded_tick', superseded,
    'hold_ms', hold_ms, 'data_lost', data_lost, 'superseded_trigger', superseded_trigger,
    'late_from', late_from);
  IF remember THEN
    -- Remembered under the claim (kept until its tick is below the watermark and expired;
    -- p_keep_ms from now at least).
    UPDATE @schema@.claims SET request_id = p_request_id, memo = reply,
      expires_us = greatest(expires_us, t_now + p_keep_ms * 1000)
    WHERE ns = p_ns AND job = p_job AND tick = claim_tick AND trigger_id = p_trigger_id;
  ELSIF revive AND decision <> 'stale' THEN
    INSERT INTO @schema@.claims AS cl (ns, job, tick, trigger_id, owner, expires_us,
                                       request_id, memo)
    VALUES (p_ns, p_job, claim_tick, p_trigger_id, p_owner, t_now + p_keep_ms * 1000,
            p_request_id, reply)
    ON CONFLICT (ns, job, tick, trigger_id) DO UPDATE SET owner = EXCLUDED.owner,
      expires_us = EXCLUDED.expires_us, request_id = EXCLUDED.request_id, memo = EXCLUDED.memo;
  END IF;
  RETURN reply || jsonb_build_object('replayed', false, 'renewed', false);
END
$$;
