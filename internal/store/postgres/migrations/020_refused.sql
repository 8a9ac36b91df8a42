-- Hard refusals at send time (550 5.1.1 and the like) in a broadcast's
-- reputation, for the bounce alarm: a sender that delivers straight to the
-- recipients' servers hears of most hard bounces this way, not through a
-- webhook. A count of outcomes, not a sum over the ledger's statuses
-- (store.Reputation.Refused). Adding a column with a constant default
-- rewrites nothing.
ALTER TABLE broadcast_reputation ADD COLUMN refused bigint NOT NULL DEFAULT 0;
ALTER TABLE broadcast_reputation_deltas ADD COLUMN refused bigint NOT NULL DEFAULT 0;
