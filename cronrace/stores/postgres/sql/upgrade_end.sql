-- upgrade_end.sql: record the version reached (the end of `cronrace db upgrade`).
--
-- Inputs: <schema>, <version> (the newest migration), <functions> (the functions' digest),
--   all substituted.
-- Replies: none.
INSERT INTO @schema@.schema_version (version, functions) VALUES (@version@, '@functions@')
ON CONFLICT (singleton) DO UPDATE
  SET version = excluded.version, functions = excluded.functions, upgraded_at = clock_timestamp();
