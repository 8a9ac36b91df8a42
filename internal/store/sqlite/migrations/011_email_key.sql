-- email_key is now address.Key (NFC, then case folded), not
-- strings.ToLower: the Go step of this migration (rekeyEmails) recomputes
-- the keys of addresses that are not ASCII, the only ones that differ.
SELECT 1;
