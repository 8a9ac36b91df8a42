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

-- A contact's send history reads the ledger by contact_id; the index now
-- also holds the broadcast, so that a lookup by the whole key (the batched
-- outcome write) reads one row through either index, whichever the planner
-- picks: on contact_id alone it read the contact's row in every broadcast
-- whenever statistics took contact ids for unique. Like 005, the build
-- blocks writes to broadcast_sends while it runs: apply it between
-- broadcasts.
DROP INDEX IF EXISTS broadcast_sends_contact;
CREATE INDEX broadcast_sends_contact ON broadcast_sends (contact_id, broadcast_id);
