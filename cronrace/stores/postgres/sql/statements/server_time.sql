-- server_time.sql: the database clock.
--
-- Inputs: none.
-- Replies: one row, (now_us).
SELECT @schema@.now_us()
