
-- Version 2: the schema records its version, operators list by tool, and
-- waiters mark the rows they wait on.
--
-- One row per version applied; the newest is the schema's version. A store
-- refuses a database whose version is newer than it knows.
CREATE TABLE IF NOT EXISTS idempotent_schema (
    version    integer     NOT NULL PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS idempotent_claims_tool_state ON idempotent_claims (tool, state);

-- Set by a waiter once it listens for the key: completions and releases
-- notify only a row a waiter marked, so the commits of calls nobody waits
-- for never take the notification queue's lock and group-commit freely.
ALTER TABLE idempotent_claims ADD COLUMN IF NOT EXISTS waiting boolean NOT NULL DEFAULT false;

INSERT INTO idempotent_schema (version) VALUES (2) ON CONFLICT (version) DO NOTHING;
