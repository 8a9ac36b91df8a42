-- Contacts are keyed by ULID (stored as uuid: 16 bytes, compared bytewise, so
-- id order is ULID order).
CREATE TABLE contacts (
    id             uuid PRIMARY KEY,
    email          text NOT NULL,
    name           text NOT NULL DEFAULT '',
    attributes     jsonb NOT NULL DEFAULT '{}',
    subscribed     boolean NOT NULL DEFAULT true,
    do_not_contact boolean NOT NULL DEFAULT false,
    suppressed     boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);
CREATE UNIQUE INDEX contacts_email_key ON contacts (lower(email));

CREATE TABLE segments (
    id         bigserial PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

CREATE TABLE segment_members (
    segment_id bigint NOT NULL REFERENCES segments (id) ON DELETE CASCADE,
    contact_id uuid NOT NULL REFERENCES contacts (id) ON DELETE CASCADE,
    PRIMARY KEY (segment_id, contact_id)
);

CREATE TABLE broadcasts (
    id                uuid PRIMARY KEY,
    name              text NOT NULL,
    request_id        text UNIQUE,
    from_name         text NOT NULL DEFAULT '',
    from_address      text NOT NULL,
    subject           text NOT NULL,
    html              text NOT NULL,
    text_body         text NOT NULL DEFAULT '',
    segment_id        bigint REFERENCES segments (id),
    throttle_per_hour bigint NOT NULL DEFAULT 0,
    state             text NOT NULL,
    reason            text NOT NULL DEFAULT '',
    snapshot_total    bigint NOT NULL DEFAULT 0,
    min_id            uuid,
    max_id            uuid,
    created_at        timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    updated_at        timestamptz NOT NULL
);

-- The ledger. A row is inserted (claimed) before its message may reach a
-- transport; the primary key makes a second claim impossible.
CREATE TABLE broadcast_sends (
    broadcast_id uuid NOT NULL REFERENCES broadcasts (id),
    contact_id   uuid NOT NULL,
    email        text NOT NULL,
    status       text NOT NULL,
    attempt      integer NOT NULL DEFAULT 1,
    message_id   text NOT NULL,
    error        text NOT NULL DEFAULT '',
    claimed_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (broadcast_id, contact_id)
);
-- Claims without an outcome: what is in flight or in doubt.
CREATE INDEX broadcast_sends_pending ON broadcast_sends (broadcast_id, claimed_at) WHERE status = 'claimed';
