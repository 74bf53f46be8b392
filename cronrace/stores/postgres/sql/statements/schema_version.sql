-- schema_version.sql: the version of the schema cronrace's tables and functions are at.
--
-- Inputs: none (<schema> substituted).
-- Replies: one row, (version, functions): the newest migration applied and the digest of
--   the functions created with it; fails with undefined_table when there is no schema.
SELECT version, functions FROM @schema@.schema_version
