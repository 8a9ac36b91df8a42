-- Retention: the leader purges old delivery events and finished
-- transactional messages in batches; these indexes let each batch find its
-- rows without scanning the table.
CREATE INDEX delivery_events_received ON delivery_events (received_at);
CREATE INDEX outbound_receipts_finished ON outbound_receipts (updated_at) WHERE status IN ('sent', 'failed', 'unknown');
