-- When a draft starts by itself (rangecast broadcasts schedule). The leading
-- coordinator starts the due ones; the time is here, not in its memory, so a
-- schedule survives a failover.
ALTER TABLE broadcasts ADD COLUMN scheduled_at timestamptz;
CREATE INDEX broadcasts_scheduled ON broadcasts (scheduled_at) WHERE state = 'draft' AND scheduled_at IS NOT NULL;
