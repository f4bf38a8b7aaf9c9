//! The integration tests of this crate, one binary with a module per file:
//! every test binary links the whole crate and what it is built on
//! (SQLite, wasmtime), so one binary instead of one per file saves the
//! links and most of the disk a fresh clone's build takes.

mod cli;
mod cluster;
mod readme;
