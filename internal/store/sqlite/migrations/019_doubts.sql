-- See the Postgres migration of the same number: a completed broadcast's
-- unknown and sent-again-in-doubt counts read only such rows.
CREATE INDEX broadcast_sends_unknown ON broadcast_sends (broadcast_id) WHERE status = 'unknown';
CREATE INDEX broadcast_sends_in_doubt ON broadcast_sends (broadcast_id) WHERE in_doubt AND accepted;
