-- See the Postgres migration of the same number: completion reads the
-- failed rows through this index, not the whole broadcast.
CREATE INDEX broadcast_sends_failed ON broadcast_sends (broadcast_id, updated_at) WHERE status = 'failed';
-- Postgres's 017 also indexes the eligible contacts for the accept-time
-- count; SQLite's contacts table is clustered on id (WITHOUT ROWID), and
-- nothing here reads that index, so it is not made.
