-- accepted: the SMTP server took the message. A row's status can leave the
-- sent ranks (an unsubscribe through the message's own link, a provider's
-- unsubscribe report) without the message becoming unsent: reports count
-- sent mail by this flag, not by the status.
ALTER TABLE broadcast_sends ADD COLUMN accepted boolean NOT NULL DEFAULT false;
UPDATE broadcast_sends SET accepted = true WHERE status IN ('sent', 'delivered', 'opened', 'clicked', 'bounced', 'complained');
