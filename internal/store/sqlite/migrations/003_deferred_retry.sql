-- Deferred rows (the governor held their provider) carry when to try again
-- (unix microseconds); the reconciler's sweep claims the due ones.
ALTER TABLE broadcast_sends ADD COLUMN retry_at integer;
CREATE INDEX broadcast_sends_deferred ON broadcast_sends (broadcast_id, retry_at) WHERE status = 'deferred';
