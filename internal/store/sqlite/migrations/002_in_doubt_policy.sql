-- Per broadcast: what to do with in-doubt claims the transport cannot look up ('' = the coordinator's default).
ALTER TABLE broadcasts ADD COLUMN in_doubt_policy text NOT NULL DEFAULT '';
