-- See the Postgres migration of the same number: edits of a paused
-- broadcast's content, counted so the page workers read it again.
ALTER TABLE broadcasts ADD COLUMN content_revision INTEGER NOT NULL DEFAULT 0;
