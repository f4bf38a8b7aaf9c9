-- Draining a node (issue 19, item 1; kernel::nodes, kernel::sched): a
-- draining node takes no new procs — no scheduler places on its workers
-- and its procds steal nothing — while what runs there finishes.
-- node.draining_us: when the operator drained it (NULL: not draining).
-- worker.draining: the same fact on each of the node's workers, where the
-- schedulers' one-partition transactions can see it.
ALTER TABLE node ADD COLUMN draining_us BIGINT;
ALTER TABLE worker ADD COLUMN draining INTEGER NOT NULL DEFAULT 0 CHECK (draining IN (0, 1));
