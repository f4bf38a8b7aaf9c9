-- Sequence numbers' blocks from a PostgreSQL sequence (issue 35, item 4):
-- on SQLite one process writes each partition, so the seq_block row stays
-- (see kernel::seqs); nothing changes here.
SELECT 1;
