-- The SQLite dialect of internal/store/postgres/migrations/004_delivery_events.sql
-- (representations as in 001_init.sql).
CREATE TABLE delivery_events (
    provider     TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    type         TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    broadcast_id BLOB CHECK (broadcast_id IS NULL OR length(broadcast_id) = 16),
    contact_id   BLOB CHECK (contact_id IS NULL OR length(contact_id) = 16),
    detail       TEXT NOT NULL DEFAULT '',
    occurred_at  INTEGER NOT NULL,
    received_at  INTEGER NOT NULL,
    PRIMARY KEY (provider, event_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX delivery_events_broadcast ON delivery_events (broadcast_id, type) WHERE broadcast_id IS NOT NULL;
