-- Transactional mail: one row per (kind, idempotency key, recipient), claimed
-- (status 'sending') before the message goes to a transport, like
-- broadcast_sends, and every attempt with the server's reply.
CREATE TABLE outbound_receipts (
    id              uuid PRIMARY KEY,
    kind            text NOT NULL,
    key             text NOT NULL,
    email           text NOT NULL,
    payload_hash    text NOT NULL,
    -- What the sender renders; opaque to the store.
    payload         bytea NOT NULL,
    message_id      text NOT NULL,
    status          text NOT NULL CHECK (status IN ('queued', 'sending', 'sent', 'failed', 'unknown')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    claimed_at      timestamptz,
    error           text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX outbound_receipts_key ON outbound_receipts (kind, key, lower(email));
-- The sweeper's two questions: queued and overdue, sending for too long.
CREATE INDEX outbound_receipts_queued ON outbound_receipts (next_attempt_at) WHERE status = 'queued';
CREATE INDEX outbound_receipts_sending ON outbound_receipts (claimed_at) WHERE status = 'sending';

CREATE TABLE outbound_attempts (
    receipt_id  uuid NOT NULL REFERENCES outbound_receipts (id) ON DELETE CASCADE,
    n           integer NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    result      text NOT NULL,
    reply       text NOT NULL DEFAULT '',
    PRIMARY KEY (receipt_id, n)
);

-- Named templates transactional messages can be rendered from.
CREATE TABLE transactional_templates (
    name         text PRIMARY KEY,
    from_address text NOT NULL DEFAULT '',
    from_name    text NOT NULL DEFAULT '',
    subject      text NOT NULL,
    text_body    text NOT NULL DEFAULT '',
    html         text NOT NULL DEFAULT '',
    version      integer NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);
