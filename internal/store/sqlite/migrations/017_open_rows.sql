-- See the Postgres migration of the same number: completion reads the
-- failed rows through this index, not the whole broadcast.
CREATE INDEX broadcast_sends_failed ON broadcast_sends (broadcast_id, updated_at) WHERE status = 'failed';
