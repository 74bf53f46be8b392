-- fleet.sql: a node's heartbeat, the fleet's fingerprint exchange, and records without a lease.
--
-- heartbeat(p_ns, p_node, p_now_ms, p_ttl_ms, p_epoch_candidate, p_prune)
--   -> jsonb {server_us, epoch, members: {node: expires_ms}, pruned}
--   Writes the epoch once (the first node's candidate), refreshes this node's expiry
--   (p_now_ms, the caller's estimate of the database clock, + p_ttl_ms), and lists every
--   member whose heartbeat had not expired. With p_prune, also deletes what is no longer
--   needed (prune() in lib.sql: expired claims below the watermark, expired members, ...).
--
-- fleet_exchange(p_ns, p_node, p_fingerprint, p_details, p_now_ms)
--   -> jsonb {fingerprints: {node: fingerprint}, dead: [node], details_missing,
--             schedules_version}
--   Publishes this node's fingerprint (and its details when p_details is not NULL) and
--   reads every live node's; `dead` lists the nodes whose rows remain although they left
--   the live set (the caller deletes them with fleet_forget).
--
-- record_runs(p_ns, p_jobs, p_records, p_missed, p_history) -> void
--   Append run records (p_records[i] for job p_jobs[i]) and add p_missed[i] to the job's
--   missed counter (0: none). Jobs are locked in the order given: callers sort them.

CREATE OR REPLACE FUNCTION @schema@.heartbeat(
  p_ns text, p_node text, p_now_ms bigint, p_ttl_ms bigint, p_epoch_candidate text,
  p_prune boolean
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  t_now bigint := @schema@.now_us();
  v_epoch text;
  v_members jsonb;
  v_pruned integer := 0;
BEGIN
  INSERT INTO @schema@.epochs (ns, epoch) VALUES (p_ns, p_epoch_candidate)
  ON CONFLICT DO NOTHING;
  SELECT epoch INTO v_epoch FROM @schema@.epochs WHERE ns = p_ns;
  INSERT INTO @schema@.nodes (ns, node, expires_ms) VALUES (p_ns, p_node, p_now_ms + p_ttl_ms)
  ON CONFLICT (ns, node) DO UPDATE SET expires_ms = excluded.expires_ms;
  SELECT coalesce(jsonb_object_agg(node, expires_ms), '{}') INTO v_members
  FROM @schema@.nodes WHERE ns = p_ns AND expires_ms >= p_now_ms;
  IF p_prune THEN
    v_pruned := @schema@.prune(p_ns, t_now);
  END IF;
  RETURN jsonb_build_object('server_us', t_now, 'epoch', v_epoch, 'members', v_members,
                            'pruned', v_pruned);
END
$$;

CREATE OR REPLACE FUNCTION @schema@.fleet_exchange(
  p_ns text, p_node text, p_fingerprint text, p_details bytea, p_now_ms bigint
) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_prints jsonb;
  v_dead jsonb;
  v_missing boolean;
  v_version bigint;
BEGIN
  INSERT INTO @schema@.fleet AS f (ns, node, fingerprint, details)
  VALUES (p_ns, p_node, p_fingerprint, p_details)
  ON CONFLICT (ns, node) DO UPDATE
    SET fingerprint = excluded.fingerprint, details = coalesce(excluded.details, f.details);
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
  SELECT details IS NULL INTO v_missing FROM @schema@.fleet WHERE ns = p_ns AND node = p_node;
  SELECT version INTO v_version FROM @schema@.schedule_versions WHERE ns = p_ns;
  RETURN jsonb_build_object('fingerprints', v_prints, 'dead', v_dead,
                            'details_missing', v_missing,
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
