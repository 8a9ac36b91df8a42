-- The identity of an address is computed in Go (address.Key: NFC, case
-- folded over all of Unicode) and stored, as SQLite has always done.
-- lower() under the C locale (CloudNativePG's default) folds ASCII only, so
-- 'Ü@x' and 'ü@x' were two contacts, and composed and decomposed 'é' were
-- two as well. lower(email) is the right key for ASCII addresses; the
-- migration's Go step (rekeyEmails) recomputes the others.
ALTER TABLE contacts ADD COLUMN email_key text;
UPDATE contacts SET email_key = lower(email);
ALTER TABLE contacts ALTER COLUMN email_key SET NOT NULL;
DROP INDEX contacts_email_key;
CREATE UNIQUE INDEX contacts_email_key ON contacts (email_key);

ALTER TABLE outbound_receipts ADD COLUMN email_key text;
UPDATE outbound_receipts SET email_key = lower(email);
ALTER TABLE outbound_receipts ALTER COLUMN email_key SET NOT NULL;
DROP INDEX outbound_receipts_key;
CREATE UNIQUE INDEX outbound_receipts_key ON outbound_receipts (kind, key, email_key);
