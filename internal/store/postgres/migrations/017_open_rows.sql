-- Completion reads only the ledger rows still open or failed (Pending), not
-- every row of the broadcast; claimed and deferred rows have their partial
-- indexes (001, 003), and this one serves the failed count and the latest
-- failure shown with it (Failures). Like 005, the build blocks writes to
-- broadcast_sends while it runs: apply it between broadcasts.
CREATE INDEX broadcast_sends_failed ON broadcast_sends (broadcast_id, updated_at) WHERE status = 'failed';

-- The eligible audience (the gate's column tests, Store.gate), with the
-- one other column the gate reads: the accept-time count, first and last id
-- and the cut of small audiences are index-only scans instead of reads of
-- every contact row. Heap fetches are saved only where vacuum has marked
-- pages all-visible: right after a bulk import, before autovacuum runs,
-- the scan still visits the rows.
CREATE INDEX contacts_eligible ON contacts (id) INCLUDE (erasure_hash)
    WHERE subscribed AND NOT do_not_contact AND NOT suppressed AND email <> '';
