//! The integration tests of this crate, one binary with a module per file:
//! every test binary links the whole crate and what it is built on
//! (SQLite, wasmtime), so one binary instead of one per file saves the
//! links and most of the disk a fresh clone's build takes.

#[macro_use]
mod common;

mod alloc;
mod auth;
mod columnar;
mod fifo;
mod fs;
mod fs_crash;
mod fs_files;
mod fs_files_crash;
mod graphs;
mod ipc;
mod layers;
mod names;
mod nodes;
mod procedures;
mod procs;
mod quotas;
mod retention;
mod scoped_sql;
mod seqs;
mod workflows;
