-- Per broadcast: created without the visible unsubscribe link check (--no-unsubscribe-link); shown in status.
ALTER TABLE broadcasts ADD COLUMN no_unsubscribe_link integer NOT NULL DEFAULT 0;
