-- Completion reads only the ledger rows still open or failed (Pending), not
-- every row of the broadcast; claimed and deferred rows have their partial
-- indexes (001, 003), and this one serves the failed count and the latest
-- failure shown with it (Failures). Like 005, the build blocks writes to
-- broadcast_sends while it runs: apply it between broadcasts.
CREATE INDEX broadcast_sends_failed ON broadcast_sends (broadcast_id, updated_at) WHERE status = 'failed';
