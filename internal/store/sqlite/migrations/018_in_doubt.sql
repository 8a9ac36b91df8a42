-- in_doubt: an attempt of this row may have been delivered (the reply to
-- its final dot was lost) and the reconciler released it to be sent again
-- under the resend policy (store.InDoubtResent). The error text said so
-- only until the resend's own outcome replaced it; a 451 on the resend,
-- then an erasure or a give-up, recorded "failed" though the first copy may
-- have arrived. The flag outlives later outcomes, so those record unknown.
-- Adding a column with a constant default rewrites nothing.
ALTER TABLE broadcast_sends ADD COLUMN in_doubt integer NOT NULL DEFAULT 0;
UPDATE broadcast_sends SET in_doubt = 1 WHERE status = 'deferred' AND error = 'in doubt: sent again (in-doubt policy resend)';
