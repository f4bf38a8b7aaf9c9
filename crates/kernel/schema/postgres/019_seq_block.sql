-- Sequence numbers of spawns and proc events (issue 18, item 1): taken in
-- blocks, one row per partition, and handed out from memory (kernel::seqs).
-- Realm removal and re-creation never reuse a number: the counter is the
-- partition's. It starts above every number realm.next_seq gave out, which
-- is no longer written.
CREATE TABLE seq_block (
    p_key    INTEGER NOT NULL PRIMARY KEY,
    next_seq BIGINT  NOT NULL              -- first number not yet reserved
);
INSERT INTO seq_block (p_key, next_seq) SELECT p_key, max(next_seq) FROM realm GROUP BY p_key;
