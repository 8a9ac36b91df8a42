-- Why a contact is suppressed and since when, as SuppressContact recorded it
-- (GetContact shows it). Contacts suppressed some other way keep '' and NULL.
ALTER TABLE contacts ADD COLUMN suppressed_reason text NOT NULL DEFAULT '';
ALTER TABLE contacts ADD COLUMN suppressed_at timestamptz;

-- A contact's send history (GetContact) reads the ledger by contact; the
-- primary key leads with the broadcast, so without this index it would scan
-- every broadcast's rows. On a large existing ledger the build blocks writes
-- to broadcast_sends while it runs: apply this migration between broadcasts.
CREATE INDEX broadcast_sends_contact ON broadcast_sends (contact_id);
