-- The SQLite dialect of internal/store/postgres/migrations/001_init.sql: the
-- same tables, columns and keys, with these representations:
--   ids         16-byte BLOBs (the ULID's bytes); SQLite compares BLOBs with
--               memcmp, so id order is ULID order, as with Postgres uuid.
--   booleans    INTEGER 0/1.
--   attributes  JSON object text.
--   times       INTEGER microseconds since the Unix epoch, UTC: the precision
--               of Postgres timestamptz, and a range that holds the zero
--               time.Time. NULL where Postgres has NULL.
-- Tables are STRICT (a value of the wrong type is an error, not coerced).
-- contacts, segment_members and broadcast_sends are WITHOUT ROWID, so rows
-- are stored in primary-key order: a page of contacts or a window of claims
-- is one range of one b-tree.

CREATE TABLE contacts (
    id             BLOB NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    email          TEXT NOT NULL,
    -- email_key is strings.ToLower(email), written by the store. It stands in
    -- for Postgres's unique index on lower(email): SQLite's lower() folds
    -- ASCII letters only, so an index on lower(email) would let
    -- 'Ölaf@x.org' and 'ölaf@x.org' be two contacts. Every lookup by email
    -- lowercases in Go the same way.
    email_key      TEXT NOT NULL,
    name           TEXT NOT NULL DEFAULT '',
    attributes     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(attributes)),
    subscribed     INTEGER NOT NULL DEFAULT 1 CHECK (subscribed IN (0, 1)),
    do_not_contact INTEGER NOT NULL DEFAULT 0 CHECK (do_not_contact IN (0, 1)),
    suppressed     INTEGER NOT NULL DEFAULT 0 CHECK (suppressed IN (0, 1)),
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE UNIQUE INDEX contacts_email_key ON contacts (email_key);

CREATE TABLE segments (
    -- AUTOINCREMENT: like bigserial, an id is never handed out twice.
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE segment_members (
    segment_id INTEGER NOT NULL REFERENCES segments (id) ON DELETE CASCADE,
    contact_id BLOB NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
    PRIMARY KEY (segment_id, contact_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE broadcasts (
    id                BLOB NOT NULL PRIMARY KEY CHECK (length(id) = 16),
    name              TEXT NOT NULL,
    request_id        TEXT UNIQUE,
    from_name         TEXT NOT NULL DEFAULT '',
    from_address      TEXT NOT NULL,
    subject           TEXT NOT NULL,
    html              TEXT NOT NULL,
    text_body         TEXT NOT NULL DEFAULT '',
    segment_id        INTEGER REFERENCES segments (id),
    throttle_per_hour INTEGER NOT NULL DEFAULT 0,
    state             TEXT NOT NULL,
    reason            TEXT NOT NULL DEFAULT '',
    snapshot_total    INTEGER NOT NULL DEFAULT 0,
    min_id            BLOB CHECK (min_id IS NULL OR length(min_id) = 16),
    max_id            BLOB CHECK (max_id IS NULL OR length(max_id) = 16),
    created_at        INTEGER NOT NULL,
    started_at        INTEGER,
    finished_at       INTEGER,
    updated_at        INTEGER NOT NULL
) STRICT;

-- The ledger. A row is inserted (claimed) before its message may reach a
-- transport; the primary key makes a second claim impossible.
CREATE TABLE broadcast_sends (
    broadcast_id BLOB NOT NULL REFERENCES broadcasts (id),
    contact_id   BLOB NOT NULL CHECK (length(contact_id) = 16),
    email        TEXT NOT NULL,
    status       TEXT NOT NULL,
    attempt      INTEGER NOT NULL DEFAULT 1,
    message_id   TEXT NOT NULL,
    error        TEXT NOT NULL DEFAULT '',
    claimed_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (broadcast_id, contact_id)
) STRICT, WITHOUT ROWID;
-- Claims without an outcome: what is in flight or in doubt.
CREATE INDEX broadcast_sends_pending ON broadcast_sends (broadcast_id, claimed_at) WHERE status = 'claimed';
