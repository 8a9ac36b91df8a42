-- Erasure (GDPR Art. 17). An erased contact's row is deleted; what is kept
-- of the address is its keyed hash (store.ErasureHash: HMAC-SHA256 of
-- address.Key under erasure_key), so that an import of the same address
-- later is suppressed and no page ever mails it.
--
-- The key is made once, by this migration's Go step, and lives here, so
-- every coordinator and worker on this database computes the same hash
-- with nothing to configure. A hash without its key cannot be tested
-- against guessed addresses; whoever holds a dump of this database holds
-- both (docs/operations.md, "Erasure").
CREATE TABLE erasure_key (
    id  integer PRIMARY KEY CHECK (id = 1),
    key bytea NOT NULL
);
CREATE TABLE erased_addresses (
    hash      text PRIMARY KEY,
    erased_at timestamptz NOT NULL
);
-- Every contact imported from now on carries the hash of its address, so
-- the page gate can test it against erased_addresses by index. Contacts
-- imported before keep NULL until their next import: none of them can be
-- an erased address (erasure deletes the contact with that address).
ALTER TABLE contacts ADD COLUMN erasure_hash text;
