-- Where each range after the first starts (internal/store/postgres/migrations/013_hot_path.sql):
-- the 16-byte ids one after another; NULL: ranges cut by id space.
ALTER TABLE broadcasts ADD COLUMN range_starts BLOB;
