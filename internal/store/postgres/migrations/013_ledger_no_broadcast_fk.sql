-- The ledger's foreign key to broadcasts made every claimed row look its
-- broadcast up (one index scan of broadcasts per message, make bench's
-- "Postgres reads by table"). Broadcasts are never deleted, and a claim
-- names a broadcast the worker has just read; the claim statement checks
-- that the broadcast exists once per window instead (claimQuery).
ALTER TABLE broadcast_sends DROP CONSTRAINT IF EXISTS broadcast_sends_broadcast_id_fkey;
