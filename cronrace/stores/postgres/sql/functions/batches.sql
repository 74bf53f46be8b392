-- batches.sql: every decision (or release) of a wake-up in one statement and one commit.
--
-- acquire_many(p_ns, p_requests) -> TABLE (i integer, reply jsonb)
--   p_requests: a JSON array of objects with acquire()'s inputs (acquire.sql): job,
--   decide_tick, mark_tick, run_tick, owner, ttl_ms, overlap, mode, request_id,
--   known_fence, trigger_id, prior_tick, late_ok.
--
-- release_many(p_ns, p_requests) -> TABLE (i integer, reply jsonb)
--   p_requests: a JSON array of objects with release()'s inputs (lease.sql): job, fence,
--   owner, ttl_ms, continue_tick, record (a JSON object or null), history.
--
-- Replies: one row per request, i its 0-based index; reply is the function's answer, or
-- {error, sqlstate} when that request failed (its writes undone, the others' kept): a
-- job whose row makes the function fail costs that job only, never the whole wake-up.
-- Requests are handled in job order, so that two batches lock their jobs' rows in one
-- order and never deadlock.
--
-- A job's row locked by another session costs that job only: a first pass waits at most
-- FIRST_WAIT_MS for each row and puts aside the jobs it could not lock; a second pass waits
-- at most LOCKED_WAIT_MS for each of those (both bounded by the statement_timeout, see
-- lock_wait in lib.sql), and a job still locked then answers lock_not_available (55P03:
-- not run, retried). Every other job of the batch is decided without waiting for it.
-- FIRST_WAIT_MS = 20 (another node's decision or renewal holds a row for milliseconds),
-- LOCKED_WAIT_MS = 500.

CREATE OR REPLACE FUNCTION @schema@.acquire_many(p_ns text, p_requests jsonb)
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
        reply := @schema@.acquire(p_ns, r.req->>'job', (r.req->>'decide_tick')::bigint,
          (r.req->>'mark_tick')::bigint, (r.req->>'run_tick')::bigint, r.req->>'owner',
          (r.req->>'ttl_ms')::bigint, r.req->>'overlap', r.req->>'mode',
          r.req->>'request_id', (r.req->>'known_fence')::bigint, r.req->>'trigger_id',
          (r.req->>'prior_tick')::bigint, (r.req->>'late_ok')::boolean,
          coalesce((r.req->>'keep_ms')::bigint, 0), coalesce((r.req->>'first_tick')::bigint, 0));
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

CREATE OR REPLACE FUNCTION @schema@.release_many(p_ns text, p_requests jsonb)
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
        reply := @schema@.release(p_ns, r.req->>'job', (r.req->>'fence')::bigint,
          r.req->>'owner', (r.req->>'ttl_ms')::bigint, (r.req->>'continue_tick')::bigint,
          nullif(r.req->'record', 'null'::jsonb), (r.req->>'history')::integer);
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
