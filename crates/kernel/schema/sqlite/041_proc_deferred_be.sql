-- A realm's deferred BE procs, oldest first: when an exit's transaction
-- has looked at the oldest deferred procs and found no worker with a core
-- free (kernel::procs::assign_deferred_tx), only a BE proc behind them
-- could still be placed, and this answers whether one waits without
-- reading every deferred proc (issue 40).
CREATE INDEX proc_deferred_be ON proc (p_key, realm, seq)
    WHERE worker_id IS NULL AND state = 'spawned' AND class = 'BE';
