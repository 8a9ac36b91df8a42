-- A paused broadcast's content may be edited (a typo, a template that
-- fails for part of the list): content_revision counts the edits, so the
-- page workers, which keep a broadcast's compiled content, know to read it
-- again. A constant default rewrites nothing.
ALTER TABLE broadcasts ADD COLUMN content_revision integer NOT NULL DEFAULT 0;
