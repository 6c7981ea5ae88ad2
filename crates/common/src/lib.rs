//! Shared primitives of the GPU-storage family.
//!
//! Everything here is used by more than one system crate (see `ARCHITECTURE.md`): the bell
//! that software controllers' idle workers sleep on, GoFS's range lock, sharded block bitmaps
//! and sequence lock, GNStor's size-class pool, PeakFS's rings, placement hashing, identity
//! tokens, and the one benchmark record every `bench` program emits. Layouts shared with CUDA
//! live beside their Rust twin in `cuda/` and carry compile-time layout asserts.

pub mod auth;
pub mod bell;
pub mod bench;
pub mod bitmap;
pub mod hash;
mod loom_compat;
pub mod range_lock;
pub mod ring;
pub mod seqlock;
