-- See the Postgres migration of the same number: hard refusals at send
-- time in a broadcast's reputation, for the bounce alarm.
ALTER TABLE broadcast_reputation ADD COLUMN refused INTEGER NOT NULL DEFAULT 0;
