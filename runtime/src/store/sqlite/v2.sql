
-- Version 2: the schema records its version, and operators list by tool.
--
-- One row per version applied; the newest is the schema's version. A store
-- refuses a database whose version is newer than it knows.
CREATE TABLE IF NOT EXISTS idempotent_schema (
    version    INTEGER NOT NULL PRIMARY KEY,
    applied_at INTEGER NOT NULL
) STRICT;

CREATE INDEX IF NOT EXISTS idempotent_claims_tool_state ON idempotent_claims (tool, state);

INSERT OR IGNORE INTO idempotent_schema (version, applied_at)
VALUES (2, CAST(unixepoch('subsec') * 1000 AS INTEGER));
