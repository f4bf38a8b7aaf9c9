//! The store's integration tests, one binary with a module per file: each
//! test binary links the whole store and SQLite, so one instead of one per
//! file saves the links and the disk a fresh clone's build takes.
//! `descriptors.rs` stays a binary of its own: it lowers the whole
//! process's descriptor limit.

#[macro_use]
mod common;

mod conformance;
mod failover;
mod postgres_only;
mod sqlite_only;
