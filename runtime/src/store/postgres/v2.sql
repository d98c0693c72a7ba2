
-- Version 2: the schema records its version, and operators list by tool.
--
-- One row per version applied; the newest is the schema's version. A store
-- refuses a database whose version is newer than it knows.
CREATE TABLE IF NOT EXISTS idempotent_schema (
    version    integer     NOT NULL PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS idempotent_claims_tool_state ON idempotent_claims (tool, state);

INSERT INTO idempotent_schema (version) VALUES (2) ON CONFLICT (version) DO NOTHING;
