//! Versioned schema migrations.
//!
//! A service owns its schema as numbered files, one per dialect
//! (`schema/sqlite/NNN_name.sql`, `schema/postgres/NNN_name.sql`), and hands
//! them to [`Store::open`](crate::Store::open) as [`Migration`]s. Each is applied
//! once, in version order, inside one transaction with the row that records it
//! in `schema_version(version, name, applied_us)`. A recorded migration whose
//! name no longer matches the code's is refused rather than guessed at.

use crate::error::{Error, Result};

/// One schema step, in both dialects.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

/// The statement creating the bookkeeping table (same on both dialects).
pub(crate) const SCHEMA_VERSION_DDL: &str = "CREATE TABLE IF NOT EXISTS schema_version (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_us BIGINT NOT NULL)";

/// Versions must be 1, 2, 3, ... with no gap or repeat.
pub(crate) fn check_sequence(migrations: &[Migration]) -> Result<()> {
    for (i, m) in migrations.iter().enumerate() {
        if m.version as usize != i + 1 {
            return Err(Error::Migration(format!(
                "migration {:?} has version {}, expected {}",
                m.name,
                m.version,
                i + 1
            )));
        }
    }
    Ok(())
}

/// Given the `(version, name)` rows already recorded, returns the migrations
/// still to apply, or an error if the record disagrees with the code.
pub(crate) fn pending<'m>(
    recorded: &[(u32, String)],
    migrations: &'m [Migration],
) -> Result<&'m [Migration]> {
    for (version, name) in recorded {
        match migrations.get((*version as usize).wrapping_sub(1)) {
            Some(m) if m.name == name => {}
            Some(m) => {
                return Err(Error::Migration(format!(
                    "database has migration {version} {name:?} but this build calls it {:?}",
                    m.name
                )))
            }
            None => {
                return Err(Error::Migration(format!(
                    "database has migration {version} {name:?}, newer than this build knows \
                     ({} migrations): upgrade tabos",
                    migrations.len()
                )))
            }
        }
    }
    Ok(&migrations[recorded.len().min(migrations.len())..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: [Migration; 2] = [
        Migration {
            version: 1,
            name: "a",
            sqlite: "",
            postgres: "",
        },
        Migration {
            version: 2,
            name: "b",
            sqlite: "",
            postgres: "",
        },
    ];

    #[test]
    fn pending_and_mismatches() {
        assert!(check_sequence(&M).is_ok());
        assert!(check_sequence(&M[1..]).is_err());
        assert_eq!(pending(&[], &M).unwrap().len(), 2);
        assert_eq!(pending(&[(1, "a".into())], &M).unwrap().len(), 1);
        assert!(pending(&[(1, "x".into())], &M).is_err());
        assert!(pending(&[(1, "a".into()), (2, "b".into()), (3, "c".into())], &M).is_err());
    }
}
