-- A completed broadcast's reason counts its unknown messages and those sent
-- again in doubt. Read by Counts, that was a read of every ledger row of
-- the broadcast at completion (make bench: rows read per message 2.4 ->
-- 3.4); these partial indexes hold only such rows, which are few. Like 017,
-- the build blocks writes to broadcast_sends while it runs.
CREATE INDEX broadcast_sends_unknown ON broadcast_sends (broadcast_id) WHERE status = 'unknown';
CREATE INDEX broadcast_sends_in_doubt ON broadcast_sends (broadcast_id) WHERE in_doubt AND accepted;
