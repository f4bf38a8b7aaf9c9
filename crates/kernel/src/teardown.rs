//! The removal of a realm (`tabos realm rm`): every owning module deletes
//! its own rows of the realm, in one transaction on the realm's partition,
//! so a removal is all or nothing. This module sits above every service
//! (it imports them; none imports it).
//!
//! Refused while the realm has live procs. Storage outside the partition's
//! rows — files' block-store segments and parallel blocks on other
//! partitions — is queued in `fs_reclaim` by the transaction and given back
//! after it commits. Nodes stop serving the realm when they hear of the
//! removal on the change feed ([`realms::REMOVED_CHANNEL`]).

use tabos_store::Tx;

use crate::fs::files::Files;
use crate::{
    auth, fs, graphs, ipc, kv, logs, names, procedures, procs, realms, validate_realm, workflows,
    Result,
};

/// Procedure body: deletes everything of `realm` on its partition; returns
/// the rows (and tenant tables) deleted.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    validate_realm(realm)?;
    // procs first: it refuses a realm that still runs something.
    let mut n = procs::remove_realm_tx(tx, realm)?;
    n += logs::remove_realm_tx(tx, realm)?;
    n += names::remove_realm_tx(tx, realm)?;
    n += fs::remove_realm_tx(tx, realm)?;
    n += kv::remove_realm_tx(tx, realm)?;
    n += ipc::remove_realm_tx(tx, realm)?;
    n += procedures::remove_realm_tx(tx, realm)?;
    n += auth::remove_realm_tx(tx, realm)?;
    n += workflows::remove_realm_tx(tx, realm)?;
    n += graphs::remove_realm_tx(tx, realm)?;
    n += realms::remove_tx(tx, realm)?;
    Ok(n)
}

/// Removes `realm` and everything of it, then gives back its files'
/// storage; returns the rows deleted.
pub async fn remove_realm(files: &Files, realm: &str) -> Result<u64> {
    let r = realm.to_string();
    let n = crate::call(files.store(), realm, move |tx| remove_realm_tx(tx, &r)).await?;
    // An elastic realm's policy and grants, on the cluster's partition.
    let r = realm.to_string();
    files
        .store()
        .run(crate::nodes::CLUSTER_PARTITION, move |tx| {
            crate::alloc::forget_tx(tx, &r)
        })
        .await?;
    files.reclaim(realm).await?;
    Ok(n)
}
