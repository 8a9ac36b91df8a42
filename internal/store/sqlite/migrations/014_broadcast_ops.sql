-- The SQLite dialect of internal/store/postgres/migrations/014_broadcast_ops.sql
-- (unix microseconds, as in 001_init.sql).
ALTER TABLE broadcasts ADD COLUMN scheduled_at INTEGER;
CREATE INDEX broadcasts_scheduled ON broadcasts (scheduled_at) WHERE state = 'draft' AND scheduled_at IS NOT NULL;
