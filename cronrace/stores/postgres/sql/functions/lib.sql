-- lib.sql: helpers of the other functions (the PostgreSQL form of the Redis store's _lib.lua).
--
-- Inputs: <schema> (substituted). Created or replaced by every `cronrace db upgrade`.
--
-- now_us() -> bigint
--   The database clock in microseconds since the Unix epoch: clock_timestamp(), which moves
--   within a transaction (now() is the transaction's start). Every node schedules on it.
--
-- next_fence(counter, lease_fence, known, now_us) -> (fence bigint, lost boolean)
--   A new fence for a job whose counter is `counter` (NULL: missing), strictly above the
--   counter, above `known` (the highest fence the caller has seen for the job, 0: none),
--   and at least the clock in microseconds. A counter that is missing or behind although
--   the caller knows a fence means the database lost the job's row (a restore, a failover
--   to an asynchronous standby that lacked the last commits): `lost` is then true, and the
--   caller holds new runs for one lease_ttl (the wipe hold). The clock floor keeps a
--   counter that no node knows to be old from handing out a fence again: microseconds,
--   since a grant, a loss and a new grant fit in one millisecond.
--
-- quarantine(ns, job, kind, value, now_us) -> text
--   Keep a garbage value for inspection (7 days); return the warning item
--   "kind|jobs.<column> of <job>|quarantine" that the store reports at ERROR.
--
-- prune(ns, now_us) -> integer
--   Delete what is no longer needed: expired claims that hold no decision (their tick is
--   above the cursor, and the job's next decision covers it), or whose tick the cursor
--   passed (a decided claim's answer is for retries only, kept claim_ttl), expired trigger
--   claims, expired nodes and fenced values, old quarantine. Claims go in batches of 5,000
--   until a batch comes back short, at most 20 batches a call: a node prunes every tenth
--   heartbeat (20 s by default), and one batch per call kept only 250 claims a second of a
--   one-node fleet's 1,000 one-second jobs (the table grew without end); 100,000 a call
--   keeps up with 5,000 one-second jobs per pruning node. Rows another node is deleting
--   are skipped (SKIP LOCKED), and so is a node's row its own heartbeat holds. Returns how
--   many went.
--
-- lock_wait(p_ms) -> void
--   For the rest of the transaction, wait at most p_ms for a row lock (lock_timeout), and
--   at most a quarter of the session's statement_timeout when one is set: a row another
--   session holds locked (an open transaction, a DBA's UPDATE) fails the call that needs
--   it with lock_not_available (55P03, retried), instead of holding it, and every job
--   batched with it, until the caller's timeout or a statement_timeout cancels them all.

CREATE OR REPLACE FUNCTION @schema@.now_us() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
  SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

CREATE OR REPLACE FUNCTION @schema@.lock_wait(p_ms integer) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  wait_ms bigint := p_ms;
  statement_ms bigint :=
    (extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::bigint;
BEGIN
  IF statement_ms > 0 THEN
    wait_ms := least(wait_ms, greatest(1, statement_ms / 4));
  END IF;
  PERFORM set_config('lock_timeout', wait_ms || 'ms', true);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.next_fence(
  counter bigint, lease_fence bigint, known bigint, now_us bigint,
  OUT fence bigint, OUT lost boolean
) LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  -- PL/pgSQL, not SQL: called from PL/pgSQL, a SQL function is planned at every call.
  fence := greatest(coalesce(counter, greatest(now_us, coalesce(lease_fence, 0))), known,
                    now_us) + 1;
  lost := (counter IS NULL AND known > 0) OR (counter IS NOT NULL AND counter < known);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.quarantine(
  p_ns text, p_job text, p_kind text, p_value text, p_now_us bigint
) RETURNS text
LANGUAGE sql VOLATILE AS $$
  INSERT INTO @schema@.quarantine (ns, job, kind, value, moved_us)
  VALUES (p_ns, p_job, p_kind, p_value, p_now_us);
  SELECT p_kind || '|jobs.' || p_kind || ' of ' || p_job || '|quarantine';
$$;

-- hold_fence(hold_until_us, hold_fence, now_us, before_fence) -> bigint
--   A wipe hold's fence as it (re)starts: the highest fence a run granted before the loss
--   can hold (such a run may write its lease back during the hold; a grant made since, a
--   fence above it, may not); the higher of the two while a hold is still on.
CREATE OR REPLACE FUNCTION @schema@.hold_fence(
  p_until_us bigint, p_fence bigint, p_now_us bigint, p_before bigint
) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF coalesce(p_until_us, 0) > p_now_us THEN
    RETURN greatest(coalesce(p_fence, 0), p_before);
  END IF;
  RETURN p_before;
END
$$;

-- start_hold(j, now_us, until_ms, before_fence) -> jobs: the job's row with the wipe hold
--   started or extended to until_ms (never shortened), and its fence (hold_fence above).
CREATE OR REPLACE FUNCTION @schema@.start_hold(
  j @schema@.jobs, p_now_us bigint, p_until_ms bigint, p_before bigint
) RETURNS @schema@.jobs
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  j.hold_fence := @schema@.hold_fence(j.hold_until_us, j.hold_fence, p_now_us, p_before);
  j.hold_until_us := greatest(coalesce(j.hold_until_us, 0), p_until_ms * 1000);
  RETURN j;
END
$$;

CREATE OR REPLACE FUNCTION @schema@.prune(p_ns text, p_now_us bigint) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  gone integer := 0;
  n integer;
  batches integer := 0;
BEGIN
  LOOP
    WITH doomed AS (
      SELECT c.ctid FROM @schema@.claims c
      LEFT JOIN @schema@.jobs j ON j.ns = c.ns AND j.job = c.job
      WHERE c.ns = p_ns AND c.expires_us < p_now_us
        AND (c.trigger_id <> ''
             -- decided (the cursor passed it), or never decided by its holder: an
             -- expired undecided claim answers nothing (its tick is above the cursor,
             -- and the job's next decision covers it)
             OR c.memo IS NULL
             OR (j.cursor_tick IS NOT NULL AND c.tick <= j.cursor_tick)
             -- a job no node schedules any more: nothing will move its cursor
             OR c.expires_us < p_now_us - 86400 * 1000000::bigint)
      LIMIT 5000
      FOR UPDATE OF c SKIP LOCKED
    )
    DELETE FROM @schema@.claims WHERE ctid IN (SELECT ctid FROM doomed);
    GET DIAGNOSTICS n = ROW_COUNT;
    gone := gone + n;
    batches := batches + 1;
    EXIT WHEN n < 5000 OR batches >= 20;
  END LOOP;
  -- A node's row is locked while its own heartbeat refreshes it: skipped, not waited
  -- for. Waiting deadlocked two nodes whose heartbeats each held its own row and wanted
  -- the other's (both expired by an outage that held every heartbeat up).
  DELETE FROM @schema@.nodes WHERE ctid IN (
    SELECT ctid FROM @schema@.nodes
    WHERE ns = p_ns AND expires_ms < p_now_us / 1000
    FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS n = ROW_COUNT;
  gone := gone + n;
  DELETE FROM @schema@.fenced_values
  WHERE ns = p_ns AND expires_us IS NOT NULL AND expires_us < p_now_us;
  GET DIAGNOSTICS n = ROW_COUNT;
  gone := gone + n;
  DELETE FROM @schema@.quarantine
  WHERE ns = p_ns AND moved_us < p_now_us - 7 * 24 * 3600 * 1000000::bigint;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN gone + n;
END
$$;
