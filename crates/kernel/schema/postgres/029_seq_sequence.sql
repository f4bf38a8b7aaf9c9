-- Sequence numbers' blocks from a PostgreSQL sequence (issue 35, item 4):
-- several nodes reserving blocks by updating one seq_block row per
-- partition serialised on that row and, holding it to their commit while
-- they locked proc rows, deadlocked with each other (a second each, the
-- server's deadlock timeout). nextval takes no row lock and is never rolled
-- back: a transaction that rolls back skips its block. One sequence serves
-- every partition (numbers unique in the database are unique in each
-- partition); each nextval reserves kernel::seqs::SEQ_BLOCK_POSTGRES (16)
-- numbers, and it starts above everything seq_block reserved.
CREATE SEQUENCE seq_blocks INCREMENT BY 16 MINVALUE 1 NO CYCLE;
SELECT setval('seq_blocks', GREATEST(1, COALESCE((SELECT max(next_seq) FROM seq_block), 1)));
