//! GoFS: a POSIX file system on F2FS's unchanged on-disk format (papers/gofs.md), reached
//! only through NVMe queues of a gpu-nvme `Controller`. This crate holds the format code and the
//! host (CPU) engine; the GPU engine reuses both.

pub mod batch;
pub mod bench;
pub mod error;
pub mod f2fs_tools;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod fuse;
pub mod mkfs;
pub mod posix;
