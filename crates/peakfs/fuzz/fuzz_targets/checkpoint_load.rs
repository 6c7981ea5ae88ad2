//! Fuzzes the checkpoint decoder (`peakfs::pstore::checkpoint::load`), which recovery runs over
//! the bytes of a checkpoint area: nothing may panic, whatever the bytes and the zone's
//! geometry (recovery checks the CRC first; a bug or a collision must still not crash it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use peakfs::pstore::checkpoint::{CKPT_MAGIC, Geometry, load};

fuzz_target!(|data: &[u8]| {
    let Some((ctl, body)) = data.split_first_chunk::<4>() else {
        return;
    };
    let geometry = Geometry {
        inode_slots: u64::from(u16::from_le_bytes([ctl[0], ctl[1]])),
        data_pages: u64::from(u16::from_le_bytes([ctl[2], ctl[3]])),
        block_pages: 16,
    };
    // Most inputs would stop at the magic: also try the body behind a valid one.
    let _ = load(body, &geometry);
    let mut with_magic = CKPT_MAGIC.to_le_bytes().to_vec();
    with_magic.extend_from_slice(body);
    if let Ok(t) = load(&with_magic, &geometry) {
        assert!(t.inodes.len() as u64 <= geometry.inode_slots);
    }
});
