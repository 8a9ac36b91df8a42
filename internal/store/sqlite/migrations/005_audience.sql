-- The SQLite dialect of internal/store/postgres/migrations/005_audience.sql.

-- Why a contact is suppressed and since when (microseconds since the Unix
-- epoch, NULL when unknown), as SuppressContact recorded it.
ALTER TABLE contacts ADD COLUMN suppressed_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE contacts ADD COLUMN suppressed_at INTEGER;

-- A contact's send history reads the ledger by contact; the primary key
-- leads with the broadcast.
CREATE INDEX broadcast_sends_contact ON broadcast_sends (contact_id);
