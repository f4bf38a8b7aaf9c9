//! The realm key-value table.
//!
//! Table `kv(p_key, realm, key, value, version, updated_us)`, primary key
//! `(p_key, realm, key)`; a realm's keys all live on
//! [`realm_partition`](crate::realm_partition) of the realm. Every write bumps
//! `version` (starting at 1) and notifies channel `kv/<realm>` with
//! `<key>=<version>` after commit.

use tabos_store::{params, Store, Tx};

use crate::{partition, validate_realm, Error, Result};

/// Longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 1_024;
/// Largest value, in bytes.
pub const VALUE_BYTES_MAX: usize = 1 << 20;

fn check(realm: &str, key: &str) -> Result<()> {
    validate_realm(realm)?;
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "key must be 1..={KEY_BYTES_MAX} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

/// The change-feed channel of a realm's key-value table.
pub fn channel(realm: &str) -> String {
    format!("kv/{realm}")
}

/// Procedure body: sets `key` to `value`; returns the new version.
pub fn put_tx(tx: &mut dyn Tx, realm: &str, key: &str, value: &[u8], now_us: i64) -> Result<i64> {
    check(realm, key)?;
    if value.len() > VALUE_BYTES_MAX {
        return Err(Error::Invalid(format!(
            "value of {} bytes exceeds {VALUE_BYTES_MAX}",
            value.len()
        )));
    }
    let p = i64::from(tx.p_key().0);
    let version: i64 = crate::realms::metered(tx, realm, |tx| {
        Ok(tx.query_scalar(
            "INSERT INTO kv (p_key, realm, key, value, version, updated_us) \
             VALUES ($1, $2, $3, $4, 1, $5) \
             ON CONFLICT (p_key, realm, key) DO UPDATE \
             SET value = excluded.value, version = kv.version + 1, \
             updated_us = excluded.updated_us RETURNING version",
            params![p, realm, key, value, now_us],
        )?)
    })?;
    tx.notify(&channel(realm), &format!("{key}={version}"))?;
    Ok(version)
}

/// Procedure body: adds `delta` to the integer stored at `key` (absent = 0),
/// returns the new value.
pub fn incr_tx(tx: &mut dyn Tx, realm: &str, key: &str, delta: i64, now_us: i64) -> Result<i64> {
    let current = get_tx(tx, realm, key)?
        .map(|v| {
            std::str::from_utf8(&v)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| Error::Invalid(format!("value at {key:?} is not an integer")))
        })
        .transpose()?
        .unwrap_or(0);
    let next = current
        .checked_add(delta)
        .ok_or_else(|| Error::Invalid("integer overflow".into()))?;
    put_tx(tx, realm, key, next.to_string().as_bytes(), now_us)?;
    Ok(next)
}

/// Procedure body: the value at `key`, if any.
pub fn get_tx(tx: &mut dyn Tx, realm: &str, key: &str) -> Result<Option<Vec<u8>>> {
    check(realm, key)?;
    let p = i64::from(tx.p_key().0);
    let row = tx.query_opt(
        "SELECT value FROM kv WHERE p_key = $1 AND realm = $2 AND key = $3",
        params![p, realm, key],
    )?;
    Ok(row.map(|r| r.get::<Vec<u8>>(0)).transpose()?)
}

/// Procedure body: deletes `key`; returns whether it existed.
pub fn delete_tx(tx: &mut dyn Tx, realm: &str, key: &str) -> Result<bool> {
    check(realm, key)?;
    let p = i64::from(tx.p_key().0);
    let n = tx.execute(
        "DELETE FROM kv WHERE p_key = $1 AND realm = $2 AND key = $3",
        params![p, realm, key],
    )?;
    if n > 0 {
        tx.notify(&channel(realm), &format!("{key}=deleted"))?;
    }
    Ok(n > 0)
}

/// The row counts [`scan_tx`] takes as its `limit` (each a literal LIMIT,
/// so each is one cached statement).
pub const SCAN_LIMITS: [usize; 4] = [16, 256, 4_096, 10_000];

/// Procedure body: up to `limit` entries (one of [`SCAN_LIMITS`]) in key
/// order from `start` (inclusive; exclusive with `after`) to `end`
/// (exclusive; `None`: the last key).
pub fn scan_tx(
    tx: &mut dyn Tx,
    realm: &str,
    start: &str,
    end: Option<&str>,
    after: bool,
    limit: usize,
) -> Result<Vec<(String, Vec<u8>)>> {
    validate_realm(realm)?;
    if !SCAN_LIMITS.contains(&limit) {
        return Err(Error::Invalid(format!(
            "a scan takes one of {SCAN_LIMITS:?} entries, not {limit}"
        )));
    }
    if start.len() > KEY_BYTES_MAX || end.is_some_and(|e| e.len() > KEY_BYTES_MAX) {
        return Err(Error::Invalid(format!(
            "scan bounds are at most {KEY_BYTES_MAX} bytes"
        )));
    }
    let p = i64::from(tx.p_key().0);
    let op = if after { ">" } else { ">=" };
    // The statement text is one of 2 × 2 × 4 fixed strings (no tenant text).
    let sql = match end {
        Some(_) => format!(
            "SELECT key, value FROM kv WHERE p_key = $1 AND realm = $2 AND key {op} $3 \
             AND key < $4 ORDER BY key LIMIT {limit}"
        ),
        None => format!(
            "SELECT key, value FROM kv WHERE p_key = $1 AND realm = $2 AND key {op} $3 \
             ORDER BY key LIMIT {limit}"
        ),
    };
    let rows = match end {
        Some(e) => tx.query_text(&sql, params![p, realm, start, e])?,
        None => tx.query_text(&sql, params![p, realm, start])?,
    };
    rows.rows
        .iter()
        .map(|r| Ok((r.get::<String>(0)?, r.get::<Vec<u8>>(1)?)))
        .collect()
}

/// Sets `key` in `realm`; blocks until committed; returns the new version.
pub fn put(store: &Store, realm: &str, key: &str, value: &[u8]) -> Result<i64> {
    let (r, k, v) = (realm.to_string(), key.to_string(), value.to_vec());
    let now = tabos_store::now_us();
    store
        .for_realm(realm)
        .call(partition(store, realm)?, move |tx| {
            put_tx(tx, &r, &k, &v, now)
        })
}

/// Reads `key` in `realm` inside a procedure (so it sees every committed write).
pub fn get(store: &Store, realm: &str, key: &str) -> Result<Option<Vec<u8>>> {
    let (r, k) = (realm.to_string(), key.to_string());
    store
        .for_realm(realm)
        .call(partition(store, realm)?, move |tx| get_tx(tx, &r, &k))
}

/// Adds `delta` to the integer at `key`; returns the new value.
pub fn incr(store: &Store, realm: &str, key: &str, delta: i64) -> Result<i64> {
    let (r, k) = (realm.to_string(), key.to_string());
    let now = tabos_store::now_us();
    store
        .for_realm(realm)
        .call(partition(store, realm)?, move |tx| {
            incr_tx(tx, &r, &k, delta, now)
        })
}

/// Deletes `key`; returns whether it existed.
pub fn delete(store: &Store, realm: &str, key: &str) -> Result<bool> {
    let (r, k) = (realm.to_string(), key.to_string());
    store
        .for_realm(realm)
        .call(partition(store, realm)?, move |tx| delete_tx(tx, &r, &k))
}

/// Procedure body: deletes `realm`'s keys (the realm's removal,
/// [`crate::teardown`]); returns the rows deleted.
pub fn remove_realm_tx(tx: &mut dyn Tx, realm: &str) -> Result<u64> {
    crate::delete_realm_rows(tx, realm, &["kv"])
}
