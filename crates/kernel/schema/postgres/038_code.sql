-- Code that travels with the request (issue 41, item 1): the content hash
-- of the uploaded tree (/code/<hash> in the realm's files) a proc runs in.
ALTER TABLE proc ADD COLUMN code TEXT;
