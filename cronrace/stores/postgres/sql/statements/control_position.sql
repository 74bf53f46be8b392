-- control_position.sql: where new control notices will appear.
--
-- Inputs: %(ns)s.
-- Replies: one row, (now_ms, last_id): the database clock and the newest notice's id (0).
SELECT @schema@.now_us() / 1000,
  coalesce((SELECT max(id) FROM @schema@.control WHERE ns = %(ns)s), 0)
