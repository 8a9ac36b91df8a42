-- The SQLite dialect of internal/store/postgres/migrations/006_outbound_receipts.sql
-- (representations as in 001_init.sql). email_key is strings.ToLower(email),
-- written by the store, standing in for Postgres's lower(email) in the
-- unique key (SQLite's lower() folds ASCII only).
CREATE TABLE outbound_receipts (
    id              BLOB NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    kind            TEXT NOT NULL,
    key             TEXT NOT NULL,
    email           TEXT NOT NULL,
    email_key       TEXT NOT NULL,
    payload_hash    TEXT NOT NULL,
    payload         BLOB NOT NULL,
    message_id      TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('queued', 'sending', 'sent', 'failed', 'unknown')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    claimed_at      INTEGER,
    error           TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX outbound_receipts_key ON outbound_receipts (kind, key, email_key);
CREATE INDEX outbound_receipts_queued ON outbound_receipts (next_attempt_at) WHERE status = 'queued';
CREATE INDEX outbound_receipts_sending ON outbound_receipts (claimed_at) WHERE status = 'sending';

CREATE TABLE outbound_attempts (
    receipt_id  BLOB NOT NULL REFERENCES outbound_receipts (id) ON DELETE CASCADE,
    n           INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    result      TEXT NOT NULL,
    reply       TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (receipt_id, n)
) STRICT, WITHOUT ROWID;

CREATE TABLE transactional_templates (
    name         TEXT NOT NULL PRIMARY KEY,
    from_address TEXT NOT NULL DEFAULT '',
    from_name    TEXT NOT NULL DEFAULT '',
    subject      TEXT NOT NULL,
    text_body    TEXT NOT NULL DEFAULT '',
    html         TEXT NOT NULL DEFAULT '',
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) STRICT;
