-- The ledger's foreign key to broadcasts made every claimed row look its
-- broadcast up (one index scan of broadcasts per message, make bench's
-- "Postgres reads by table"). Broadcasts are never deleted, and a claim
-- names a broadcast the worker has just read; the claim statement checks
-- that the broadcast exists once per window instead (claimQuery).
ALTER TABLE broadcast_sends DROP CONSTRAINT IF EXISTS broadcast_sends_broadcast_id_fkey;

-- Where each range after the first starts, cut when the broadcast is
-- accepted from a sample of the audience's ids (ranges.Cuts), so ranges hold
-- about as many contacts each however ids cluster. NULL: ranges cut by id
-- space (broadcasts accepted before, and audiences too small to sample).
ALTER TABLE broadcasts ADD COLUMN range_starts uuid[];
