-- The SQLite dialect of internal/store/postgres/migrations/008_reputation.sql:
-- running sums of store.Reputation per broadcast, so the reputation alarm's
-- read does not count the ledger. SQLite has one writer, so every change
-- adds to the broadcast's one row directly; Postgres's table of deltas is
-- there for concurrent writers SQLite does not have.
CREATE TABLE broadcast_reputation (
    broadcast_id BLOB NOT NULL PRIMARY KEY REFERENCES broadcasts (id),
    accepted     INTEGER NOT NULL DEFAULT 0,
    delivered    INTEGER NOT NULL DEFAULT 0,
    bounced      INTEGER NOT NULL DEFAULT 0,
    complained   INTEGER NOT NULL DEFAULT 0
) STRICT, WITHOUT ROWID;

-- Backfill from the ledger, under the write lock the migration holds, so
-- the sums start exactly where the ledger is.
INSERT INTO broadcast_reputation (broadcast_id, accepted, delivered, bounced, complained)
SELECT broadcast_id,
       count(*) FILTER (WHERE accepted),
       count(*) FILTER (WHERE status IN ('delivered', 'opened', 'clicked', 'complained')),
       count(*) FILTER (WHERE status = 'bounced'),
       count(*) FILTER (WHERE status = 'complained')
FROM broadcast_sends GROUP BY broadcast_id;
