//! Block and buffer allocators built on bitmaps.
//!
//! - [`sharded`]: GoFS's per-SM block bitmaps (papers/gofs.md §3.3).
//! - [`size_class`]: GNStor's multi-level GNoR memory pool (papers/gnstor.md §4.2).

pub mod sharded;
pub mod size_class;
