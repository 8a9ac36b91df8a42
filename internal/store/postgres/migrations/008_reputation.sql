-- Running sums of store.Reputation per broadcast, so the reputation alarm's
-- read does not count the ledger (every 30 s, O(audience) each time).
--
-- Page workers write outcomes concurrently, so they must not all update one
-- row per broadcast: each transaction that changes the sums appends its own
-- row to broadcast_reputation_deltas instead (an insert takes no lock another
-- writer waits for), and Reputation folds the deltas into
-- broadcast_reputation. A fold reads only the deltas written since the last
-- one: its cost follows the send rate, not the audience.
--
-- Accepted is kept here too, not taken from the coordinator's per-range Sent
-- (the sum of worker reports in KV): a report can be lost (a worker dies
-- after its outcomes commit), ignored (its range was moved back), and
-- deferred retries and delivery reports on claimed rows never reach it. KV
-- is a hint; the alarm needs the ledger's number.
CREATE TABLE broadcast_reputation (
    broadcast_id uuid PRIMARY KEY REFERENCES broadcasts (id),
    accepted     bigint NOT NULL DEFAULT 0,
    delivered    bigint NOT NULL DEFAULT 0,
    bounced      bigint NOT NULL DEFAULT 0,
    complained   bigint NOT NULL DEFAULT 0
);
-- No foreign key: its check would take a share lock on the broadcast's row
-- in every worker's outcome transaction.
CREATE TABLE broadcast_reputation_deltas (
    broadcast_id uuid NOT NULL,
    accepted     bigint NOT NULL DEFAULT 0,
    delivered    bigint NOT NULL DEFAULT 0,
    bounced      bigint NOT NULL DEFAULT 0,
    complained   bigint NOT NULL DEFAULT 0
);
CREATE INDEX broadcast_reputation_deltas_broadcast ON broadcast_reputation_deltas (broadcast_id);

-- Backfill from the ledger. A writer running this version's code cannot
-- commit a delta before this migration commits (the table does not exist
-- until then), so the sums start exactly where the ledger is. Writers of an
-- older version still running afterwards are not counted: upgrade page
-- workers and coordinators before a broadcast relies on the alarms again.
INSERT INTO broadcast_reputation (broadcast_id, accepted, delivered, bounced, complained)
SELECT broadcast_id,
       count(*) FILTER (WHERE accepted),
       count(*) FILTER (WHERE status IN ('delivered', 'opened', 'clicked', 'complained')),
       count(*) FILTER (WHERE status = 'bounced'),
       count(*) FILTER (WHERE status = 'complained')
FROM broadcast_sends GROUP BY broadcast_id;
