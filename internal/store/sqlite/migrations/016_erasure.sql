-- Erasure (GDPR Art. 17); see the Postgres migration of the same number.
-- The key is made once by this migration's Go step.
CREATE TABLE erasure_key (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    key BLOB NOT NULL
) STRICT;
CREATE TABLE erased_addresses (
    hash      TEXT NOT NULL PRIMARY KEY,
    erased_at INTEGER NOT NULL
) STRICT;
ALTER TABLE contacts ADD COLUMN erasure_hash TEXT;
