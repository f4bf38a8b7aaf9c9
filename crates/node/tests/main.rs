//! The integration tests of this crate, one binary with a module per file:
//! every test binary links the whole crate and what it is built on
//! (SQLite, wasmtime), so one binary instead of one per file saves the
//! links and most of the disk a fresh clone's build takes.

mod common;

mod api;
mod auth;
mod batch;
mod connections;
mod elastic;
mod failover;
mod fs;
mod ipc;
mod local;
mod names;
mod nodes;
mod ops;
mod procedures;
mod procs;
