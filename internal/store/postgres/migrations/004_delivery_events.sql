-- Delivery events reported by mail providers' webhooks. Each is stored once
-- per provider and provider event id: a provider's retry finds its row and
-- changes nothing. broadcast_id/contact_id name the ledger row the event's
-- Message-ID matched (NULL when it matched none, e.g. mail sent elsewhere).
CREATE TABLE delivery_events (
    provider     text NOT NULL,
    event_id     text NOT NULL,
    type         text NOT NULL,
    message_id   text NOT NULL,
    broadcast_id uuid,
    contact_id   uuid,
    detail       text NOT NULL DEFAULT '',
    occurred_at  timestamptz NOT NULL,
    received_at  timestamptz NOT NULL,
    PRIMARY KEY (provider, event_id)
);
-- A broadcast's events, for its report.
CREATE INDEX delivery_events_broadcast ON delivery_events (broadcast_id, type) WHERE broadcast_id IS NOT NULL;
