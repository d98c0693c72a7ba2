
-- Version 3: one word per state. A row's `state` is 'held', 'done',
-- 'failed' or 'unknown' (it was 'held' or 'done', with the end in an
-- `ending` column), and `finished_at` is `completed_at`.
ALTER TABLE idempotent_claims DROP CONSTRAINT IF EXISTS idempotent_claims_state_check;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'idempotent_claims'
                 AND column_name = 'ending') THEN
        UPDATE idempotent_claims
        SET state = CASE ending WHEN 'ok' THEN 'done' WHEN 'err' THEN 'failed' ELSE 'unknown' END
        WHERE state = 'done';
        ALTER TABLE idempotent_claims DROP COLUMN ending;
    END IF;
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'idempotent_claims'
                 AND column_name = 'finished_at') THEN
        ALTER TABLE idempotent_claims RENAME COLUMN finished_at TO completed_at;
    END IF;
END $$;

ALTER TABLE idempotent_claims ADD CONSTRAINT idempotent_claims_state_check
    CHECK (state IN ('held', 'done', 'failed', 'unknown'));

INSERT INTO idempotent_schema (version) VALUES (3) ON CONFLICT (version) DO NOTHING;
