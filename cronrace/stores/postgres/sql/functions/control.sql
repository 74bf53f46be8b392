-- control.sql: control notices, stored schedules, and handlers' fenced writes.
--
-- post_control(p_ns, p_fields) -> text
--   Append a notice ({op: trigger, job, id} or {op: schedules, first, last, names}) and
--   return its id, "<posted_ms>-<id>" like a Redis stream id. Posted under a
--   transaction-level advisory lock per namespace (no session state: safe behind a
--   transaction-mode pooler), so ids commit in the order they were taken and a reader
--   reading "after id N" never skips one that commits later. The newest 1,000 are kept.
--   Notifies channel cronrace_control with the namespace (delivered at commit): a node
--   LISTENing reads the table at once (stores/postgres/listen.py).
--
-- schedules_write(p_ns, p_ops, p_names, p_definitions) -> jsonb {status, detail, first, last}
--   Apply a batch of changes all or nothing and count each: p_ops[i] is add (the name must
--   be absent), update or remove (present), or put (either); p_definitions[i] the JSON
--   ('' for remove). status 'ok': first..last are the versions of these changes; 'exists'
--   or 'missing': detail names the change that refused the batch, and nothing was written.
--   The version is seeded from the clock in microseconds when missing, so it never goes
--   back to a value a node has seen. A change notice is posted in the same transaction.
--
-- fenced_set(p_ns, p_key, p_value, p_fence, p_ttl_ms) -> boolean
--   Write p_value under p_key unless a higher fence wrote it before (an expired value
--   counts as absent); true when written. p_ttl_ms 0: no expiry.

CREATE OR REPLACE FUNCTION @schema@.post_control(p_ns text, p_fields jsonb) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_ms bigint := @schema@.now_us() / 1000;
  v_id bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('cronrace.control:' || p_ns, 0));
  INSERT INTO @schema@.control (ns, posted_ms, fields) VALUES (p_ns, v_ms, p_fields)
  RETURNING id INTO v_id;
  PERFORM pg_notify('cronrace_control', p_ns);
  IF v_id % 100 = 0 THEN
    DELETE FROM @schema@.control WHERE ns = p_ns AND id <= (
      SELECT id FROM @schema@.control WHERE ns = p_ns ORDER BY id DESC OFFSET 1000 LIMIT 1);
  END IF;
  RETURN v_ms || '-' || v_id;
END
$$;

CREATE OR REPLACE FUNCTION @schema@.schedules_write(
  p_ns text, p_ops text[], p_names text[], p_definitions bytea[]
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_version bigint;
  v_first bigint := 0;
  i integer;
  present boolean;
  n integer := coalesce(cardinality(p_ops), 0);
BEGIN
  -- The namespace's version row is the lock that serializes writers.
  INSERT INTO @schema@.schedule_versions (ns, version)
  VALUES (p_ns, @schema@.now_us()) ON CONFLICT DO NOTHING;
  SELECT version INTO v_version FROM @schema@.schedule_versions WHERE ns = p_ns FOR UPDATE;
  FOR i IN 1 .. n LOOP
    present := EXISTS (SELECT 1 FROM @schema@.schedules WHERE ns = p_ns AND name = p_names[i]);
    IF p_ops[i] = 'add' AND present THEN
      RETURN jsonb_build_object('status', 'exists', 'detail', p_names[i], 'first', 0, 'last', 0);
    END IF;
    IF p_ops[i] IN ('update', 'remove') AND NOT present THEN
      RETURN jsonb_build_object('status', 'missing', 'detail', p_names[i], 'first', 0, 'last', 0);
    END IF;
  END LOOP;
  FOR i IN 1 .. n LOOP
    IF p_ops[i] = 'remove' THEN
      DELETE FROM @schema@.schedules WHERE ns = p_ns AND name = p_names[i];
    ELSE
      INSERT INTO @schema@.schedules (ns, name, definition) VALUES (p_ns, p_names[i], p_definitions[i])
      ON CONFLICT (ns, name) DO UPDATE SET definition = excluded.definition;
    END IF;
    v_version := v_version + 1;
    IF v_first = 0 THEN v_first := v_version; END IF;
  END LOOP;
  UPDATE @schema@.schedule_versions SET version = v_version WHERE ns = p_ns;
  IF n > 0 THEN
    PERFORM @schema@.post_control(p_ns, jsonb_build_object(
      'op', 'schedules', 'first', v_first::text, 'last', v_version::text,
      'names', CASE WHEN n <= 100 THEN array_to_string(p_names, ',') ELSE '' END));
  END IF;
  RETURN jsonb_build_object('status', 'ok', 'detail', '', 'first', v_first, 'last',
                            CASE WHEN n > 0 THEN v_version ELSE 0 END);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.fenced_set(
  p_ns text, p_key text, p_value bytea, p_fence bigint, p_ttl_ms bigint
) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
  WITH t AS (SELECT @schema@.now_us() AS now_us),
  written AS (
    INSERT INTO @schema@.fenced_values AS v (ns, key, value, fence, expires_us)
    SELECT p_ns, p_key, p_value, p_fence,
           CASE WHEN p_ttl_ms > 0 THEN t.now_us + p_ttl_ms * 1000 END
    FROM t
    ON CONFLICT (ns, key) DO UPDATE
      SET value = excluded.value, fence = excluded.fence, expires_us = excluded.expires_us
      WHERE v.fence <= excluded.fence
         OR (v.expires_us IS NOT NULL AND v.expires_us < (SELECT now_us FROM t))
    RETURNING 1
  )
  SELECT EXISTS (SELECT 1 FROM written)
$$;
