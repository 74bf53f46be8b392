-- fleet.sql: a node's heartbeat, the fleet's change log and fingerprint exchange, and
-- records without a lease.
--
-- fleet_log_add(p_ns, p_node, p_kind, p_value) -> bigint
--   Append one change (kind 'join', 'leave' or 'print') to the namespace's log under the
--   next number of its counter (taken under the counter row's lock: numbers follow commit
--   order, without holes). Every 100th number trims the log to its last 10,000 rows.
--
-- fleet_changes(p_ns, p_since) -> jsonb {entries: [[seq, node, kind, value]], cursor, gap}
--   The changes numbered after p_since (at most 1,001, oldest first), the cursor to read
--   from next, and whether the log no longer reaches back to p_since (read in full then).
--
-- heartbeat(p_ns, p_node, p_now_ms, p_ttl_ms, p_epoch_candidate, p_prune, p_since,
--           p_joined, p_live_after_ms, p_asserted, p_read_asserted, p_recheck)
--   -> jsonb {server_us, epoch, pruned, cursor, and either members: {node: expires_ms}
--             (p_since NULL: every live member) or changes, silent: {node: expires_ms},
--             live_count, back: {node: expires_ms} (the changes since p_since, the
--             members expiring before p_live_after_ms, how many expire at or after it,
--             and those of p_recheck that do: read silent before, beating again)}
--   p_asserted: the epoch this node re-asserted its runs' leases for (after a wipe);
--   with p_read_asserted, every live member's is read back as `asserted` {node: epoch}.
--   Writes the epoch once (the first node's candidate), refreshes this node's expiry
--   (p_now_ms, the caller's estimate of the database clock, + p_ttl_ms), logs it as
--   joined when p_joined. With p_prune, also deletes what is no longer needed (prune() in
--   lib.sql: expired claims below the cursor or undecided, expired members, ...).
--
-- leave_fleet(p_ns, p_node) -> void
--   Remove this node from the live set and log that it left.
--
-- fleet_exchange(p_ns, p_node, p_fingerprint, p_details, p_now_ms, p_since, p_changed)
--   -> jsonb {fingerprints: {node: fingerprint}, dead: [node], details_missing,
--             schedules_version, cursor, and with p_since: changes, gap}
--   Publishes this node's fingerprint (and its details when p_details is not NULL), logs
--   it when p_changed. With p_since NULL, reads every live node's; `dead` lists the nodes
--   whose rows remain although they left the live set (the caller deletes them with
--   fleet_forget). With a cursor, only the changes since (the fingerprints among them).
--
-- record_runs(p_ns, p_jobs, p_records, p_missed, p_history) -> void
--   Append run records (p_records[i] for job p_jobs[i]) and add p_missed[i] to the job's
--   missed counter (0: none). Jobs are locked in the order given: callers sort them.

CREATE OR REPLACE FUNCTION @schema@.fleet_log_add(
  p_ns text, p_node text, p_kind text, p_value text
) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_seq bigint;
BEGIN
  INSERT INTO @schema@.fleet_seq AS s (ns, seq) VALUES (p_ns, 1)
  ON CONFLICT (ns) DO UPDATE SET seq = s.seq + 1
  RETURNING seq INTO v_seq;
  INSERT INTO @schema@.fleet_log (ns, seq, node, kind, value)
  VALUES (p_ns, v_seq, p_node, p_kind, coalesce(p_value, ''));
  IF v_seq % 100 = 0 THEN
    DELETE FROM @schema@.fleet_log WHERE ns = p_ns AND seq <= v_seq - 10000;
  END IF;
  RETURN v_seq;
END
$$;

CREATE OR REPLACE FUNCTION @schema@.fleet_changes(p_ns text, p_since bigint) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_last bigint;
  v_oldest bigint;
  v_entries jsonb;
  v_count integer;
  v_cursor bigint;
BEGIN
  -- Every number up to the counter's committed value is committed (fleet_log_add).
  SELECT seq INTO v_last FROM @schema@.fleet_seq WHERE ns = p_ns;
  v_last := coalesce(v_last, 0);
  SELECT coalesce(jsonb_agg(jsonb_build_array(seq, node, kind, value) ORDER BY seq), '[]'),
         count(*), max(seq)
  INTO v_entries, v_count, v_cursor
  FROM (SELECT seq, node, kind, value FROM @schema@.fleet_log
        WHERE ns = p_ns AND seq > p_since AND seq <= v_last
        ORDER BY seq LIMIT 1001) e;
  SELECT min(seq) INTO v_oldest FROM @schema@.fleet_log WHERE ns = p_ns;
  RETURN jsonb_build_object(
    'entries', v_entries,
    'cursor', coalesce(v_cursor, least(p_since, v_last)),
    'gap', v_count > 1000 OR p_since > v_last
           OR (v_last > p_since AND (v_oldest IS NULL OR v_oldest > p_since + 1)));
END
$$;

CREATE OR REPLACE FUNCTION @schema@.heartbeat(
  p_ns text, p_node text, p_now_ms bigint, p_ttl_ms bigint, p_epoch_candidate text,
  p_prune boolean, p_since bigint, p_joined boolean, p_live_after_ms bigint,
  p_asserted text, p_read_asserted boolean, p_recheck text[]
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  t_now bigint := @schema@.now_us();
  v_epoch text;
  v_reply jsonb;
  v_silent jsonb;
  v_live integer;
  v_back jsonb;
  v_pruned integer := 0;
BEGIN
  INSERT INTO @schema@.epochs (ns, epoch) VALUES (p_ns, p_epoch_candidate)
  ON CONFLICT DO NOTHING;
  SELECT epoch INTO v_epoch FROM @schema@.epochs WHERE ns = p_ns;
  INSERT INTO @schema@.nodes (ns, node, expires_ms, asserted_epoch)
  VALUES (p_ns, p_node, p_now_ms + p_ttl_ms, p_asserted)
  ON CONFLICT (ns, node) DO UPDATE
    SET expires_ms = excluded.expires_ms, asserted_epoch = excluded.asserted_epoch;
  IF p_joined THEN
    PERFORM @schema@.fleet_log_add(p_ns, p_node, 'join', (p_now_ms + p_ttl_ms)::text);
  END IF;
  IF p_since IS NULL THEN
    -- The cursor first: a change logged between the two reads is read again next time.
    SELECT jsonb_build_object('cursor', coalesce(max(seq), 0)) INTO v_reply
    FROM @schema@.fleet_seq WHERE ns = p_ns;
    SELECT v_reply || jsonb_build_object('members', coalesce(jsonb_object_agg(node, expires_ms), '{}'))
    INTO v_reply
    FROM @schema@.nodes WHERE ns = p_ns AND expires_ms >= p_now_ms;
  ELSE
    v_reply := jsonb_build_object('changes', @schema@.fleet_changes(p_ns, p_since));
    SELECT coalesce(jsonb_object_agg(node, expires_ms)
                      FILTER (WHERE expires_ms < p_live_after_ms), '{}'),
           count(*) FILTER (WHERE expires_ms >= p_live_after_ms)
    INTO v_silent, v_live
    FROM @schema@.nodes WHERE ns = p_ns;
    SELECT coalesce(jsonb_object_agg(node, expires_ms), '{}') INTO v_back
    FROM @schema@.nodes
    WHERE ns = p_ns AND node = ANY(coalesce(p_recheck, '{}')) AND expires_ms >= p_live_after_ms;
    v_reply := v_reply || jsonb_build_object('silent', v_silent, 'live_count', v_live,
                                             'back', v_back);
  END IF;
  IF p_read_asserted THEN
    SELECT v_reply || jsonb_build_object('asserted',
             coalesce(jsonb_object_agg(node, asserted_epoch), '{}'))
    INTO v_reply
    FROM @schema@.nodes WHERE ns = p_ns AND expires_ms >= p_now_ms;
  END IF;
  IF p_prune THEN
    v_pruned := @schema@.prune(p_ns, t_now);
  END IF;
  RETURN v_reply || jsonb_build_object('server_us', t_now, 'epoch', v_epoch,
                                       'pruned', v_pruned);
END
$$;

-- The eleven-argument heartbeat() of schema version 12, for agents of the release before
-- during a rolling deploy (their late beats still log a join, which every node reads).
CREATE OR REPLACE FUNCTION @schema@.heartbeat(
  p_ns text, p_node text, p_now_ms bigint, p_ttl_ms bigint, p_epoch_candidate text,
  p_prune boolean, p_since bigint, p_joined boolean, p_live_after_ms bigint,
  p_asserted text, p_read_asserted boolean
) RETURNS jsonb
LANGUAGE sql VOLATILE AS $$
  SELECT @schema@.heartbeat(p_ns, p_node, p_now_ms, p_ttl_ms, p_epoch_candidate, p_prune,
                            p_since, p_joined, p_live_after_ms, p_asserted,
                            p_read_asserted, NULL::text[])
$$;

CREATE OR REPLACE FUNCTION @schema@.leave_fleet(p_ns text, p_node text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  DELETE FROM @schema@.nodes WHERE ns = p_ns AND node = p_node;
  PERFORM @schema@.fleet_log_add(p_ns, p_node, 'leave', '');
END
$$;

CREATE OR REPLACE FUNCTION @schema@.fleet_exchange(
  p_ns text, p_node text, p_fingerprint text, p_details bytea, p_now_ms bigint,
  p_since bigint, p_changed boolean
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_reply jsonb;
  v_prints jsonb;
  v_dead jsonb;
  v_missing boolean;
  v_version bigint;
BEGIN
  IF p_changed OR p_since IS NULL OR p_details IS NOT NULL THEN
    INSERT INTO @schema@.fleet AS f (ns, node, fingerprint, details)
    VALUES (p_ns, p_node, p_fingerprint, p_details)
    ON CONFLICT (ns, node) DO UPDATE
      SET fingerprint = excluded.fingerprint, details = coalesce(excluded.details, f.details);
  END IF;
  IF p_changed THEN
    PERFORM @schema@.fleet_log_add(p_ns, p_node, 'print', p_fingerprint);
  END IF;
  IF p_since IS NULL THEN
    SELECT jsonb_build_object('cursor', coalesce(max(seq), 0)) INTO v_reply
    FROM @schema@.fleet_seq WHERE ns = p_ns;
    WITH live AS (
      SELECT node FROM @schema@.nodes WHERE ns = p_ns AND expires_ms >= p_now_ms
      UNION SELECT p_node
    )
    SELECT coalesce(jsonb_object_agg(f.node, f.fingerprint)
                      FILTER (WHERE l.node IS NOT NULL AND f.fingerprint IS NOT NULL), '{}'),
           coalesce(jsonb_agg(f.node ORDER BY f.node) FILTER (WHERE l.node IS NULL), '[]')
    INTO v_prints, v_dead
    FROM @schema@.fleet f LEFT JOIN live l ON l.node = f.node
    WHERE f.ns = p_ns;
    v_reply := v_reply || jsonb_build_object('fingerprints', v_prints, 'dead', v_dead);
  ELSE
    v_reply := jsonb_build_object('changes', @schema@.fleet_changes(p_ns, p_since));
  END IF;
  SELECT details IS NULL INTO v_missing FROM @schema@.fleet WHERE ns = p_ns AND node = p_node;
  SELECT version INTO v_version FROM @schema@.schedule_versions WHERE ns = p_ns;
  RETURN v_reply || jsonb_build_object('details_missing', coalesce(v_missing, true),
                                       'schedules_version', coalesce(v_version, 0));
END
$$;

CREATE OR REPLACE FUNCTION @schema@.record_runs(
  p_ns text, p_jobs text[], p_records jsonb[], p_missed bigint[], p_history integer
) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  t_now bigint := @schema@.now_us();
  i integer;
BEGIN
  FOR i IN 1 .. coalesce(cardinality(p_jobs), 0) LOOP
    PERFORM @schema@.add_record(p_ns, p_jobs[i], p_records[i], p_history, t_now);
    IF p_missed[i] > 0 THEN
      INSERT INTO @schema@.jobs AS t (ns, job, missed) VALUES (p_ns, p_jobs[i], p_missed[i])
      ON CONFLICT (ns, job) DO UPDATE SET missed = coalesce(t.missed, 0) + excluded.missed;
    END IF;
  END LOOP;
END
$$;
