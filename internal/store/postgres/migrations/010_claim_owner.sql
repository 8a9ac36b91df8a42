-- Every claim names its owner: the page worker and the run of the page that
-- inserted it ("worker/run"). Outcome and release writes match it, so a slow
-- worker's late write cannot act on a row another run holds now, and the
-- reconciler decides "in doubt" from the owner's liveness instead of from
-- comparing two machines' clocks. Rows claimed before this migration keep
-- the empty owner, which no live worker has.
ALTER TABLE broadcast_sends ADD COLUMN owner text NOT NULL DEFAULT '';
