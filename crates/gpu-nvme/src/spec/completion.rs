//! Completion queue entry (NVMe Base 2.x §4.2, Figure "Common Completion Queue Entry Layout"):
//! 16 bytes whose phase tag tells a polling host that the entry is new (BaM's completion scan).

use core::mem::{offset_of, size_of};

use super::le;
use super::status::Status;

/// A 16-byte completion queue entry, laid out as on the wire (and as `struct nvme_cqe` in
/// `cuda/nvme_spec.cuh`) so it can be written into a queue in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct CompletionEntry {
    /// Dword 0, command specific (e.g. the queue counts granted by Set Features).
    pub dw0: u32,
    /// Dword 1, command specific.
    pub dw1: u32,
    /// SQ head pointer: how far the controller has consumed the SQ, so the host can reuse slots.
    pub sq_head: u16,
    /// Submission queue the command came from.
    pub sq_id: u16,
    /// Command identifier of the completed command.
    pub cid: u16,
    /// Phase tag (bit 0) and status field (bits 1-15); decoded by [`phase`](Self::phase) and
    /// [`status`](Self::status).
    pub status: u16,
}

const _: () = assert!(size_of::<CompletionEntry>() == 16);
const _: () = assert!(offset_of!(CompletionEntry, dw0) == 0);
const _: () = assert!(offset_of!(CompletionEntry, dw1) == 4);
const _: () = assert!(offset_of!(CompletionEntry, sq_head) == 8);
const _: () = assert!(offset_of!(CompletionEntry, sq_id) == 10);
const _: () = assert!(offset_of!(CompletionEntry, cid) == 12);
const _: () = assert!(offset_of!(CompletionEntry, status) == 14);

impl CompletionEntry {
    /// Size of an entry on the wire.
    pub const SIZE: usize = size_of::<CompletionEntry>();

    /// The completion of command `cid` from SQ `sq_id`, reporting SQ head `sq_head`, with
    /// `status`, phase tag `phase` and command specific `dw0`.
    pub const fn new(
        cid: u16,
        sq_id: u16,
        sq_head: u16,
        status: Status,
        phase: bool,
        dw0: u32,
    ) -> Self {
        Self {
            dw0,
            dw1: 0,
            sq_head,
            sq_id,
            cid,
            status: (status.to_field() << 1) | phase as u16,
        }
    }

    /// Phase tag: flips each time the controller wraps around the CQ, so an entry whose phase
    /// equals the host's expected phase is new.
    pub const fn phase(&self) -> bool {
        self.status & 1 != 0
    }

    /// The status field.
    pub const fn status(&self) -> Status {
        Status::from_field_bits(self.status >> 1)
    }

    /// Decodes an entry from its 16 little-endian bytes; every byte pattern is an entry.
    pub fn from_bytes(bytes: &[u8; Self::SIZE]) -> Self {
        Self {
            dw0: le::u32_at(bytes, offset_of!(Self, dw0)),
            dw1: le::u32_at(bytes, offset_of!(Self, dw1)),
            sq_head: le::u16_at(bytes, offset_of!(Self, sq_head)),
            sq_id: le::u16_at(bytes, offset_of!(Self, sq_id)),
            cid: le::u16_at(bytes, offset_of!(Self, cid)),
            status: le::u16_at(bytes, offset_of!(Self, status)),
        }
    }

    /// The 16 little-endian bytes of this entry.
    pub fn to_bytes(&self) -> [u8; Self::SIZE] {
        let mut bytes = [0; Self::SIZE];
        le::put_u32(&mut bytes, offset_of!(Self, dw0), self.dw0);
        le::put_u32(&mut bytes, offset_of!(Self, dw1), self.dw1);
        le::put_u16(&mut bytes, offset_of!(Self, sq_head), self.sq_head);
        le::put_u16(&mut bytes, offset_of!(Self, sq_id), self.sq_id);
        le::put_u16(&mut bytes, offset_of!(Self, cid), self.cid);
        le::put_u16(&mut bytes, offset_of!(Self, status), self.status);
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::status::RetryDelay;
    use proptest::prelude::*;

    #[test]
    fn completion_bytes_follow_the_spec_layout() {
        let cqe = CompletionEntry::new(0x1234, 3, 17, Status::lba_out_of_range(), true, 0xA5);
        let bytes = cqe.to_bytes();
        assert_eq!(&bytes[0..4], &[0xA5, 0, 0, 0], "DW0");
        assert_eq!(&bytes[8..10], &[17, 0], "SQ head");
        assert_eq!(&bytes[10..12], &[3, 0], "SQ ID");
        assert_eq!(&bytes[12..14], &[0x34, 0x12], "CID");
        // Phase bit 0; SC 0x80 in bits 1-8; DNR bit 15.
        assert_eq!(
            u16::from_le_bytes([bytes[14], bytes[15]]),
            0x8000 | (0x80 << 1) | 1
        );
    }

    #[test]
    fn phase_and_status_decode_independently() {
        let ok = CompletionEntry::new(1, 1, 0, Status::SUCCESS, false, 0);
        assert!(!ok.phase() && ok.status().is_success());
        let failed = CompletionEntry::new(1, 1, 0, Status::write_fault(), true, 0);
        assert!(failed.phase());
        assert_eq!(failed.status(), Status::write_fault());
    }

    proptest! {
        #[test]
        fn any_16_bytes_roundtrip(raw: [u8; 16]) {
            let cqe = CompletionEntry::from_bytes(&raw);
            prop_assert_eq!(cqe.to_bytes(), raw);
            let rebuilt =
                CompletionEntry::new(
                    cqe.cid, cqe.sq_id, cqe.sq_head, cqe.status(), cqe.phase(), cqe.dw0,
                );
            prop_assert_eq!(rebuilt, CompletionEntry { dw1: 0, ..cqe });
        }

        #[test]
        fn new_keeps_every_argument(
            cid: u16, sq_id: u16, sq_head: u16, phase: bool, dw0: u32,
            sct in 0u8..8, sc: u8, crd in 0u8..4, more: bool, dnr: bool,
        ) {
            let status = Status {
                sct: Status::from_field(u16::from(sct) << 8).unwrap().sct,
                sc,
                crd: [RetryDelay::None, RetryDelay::Crdt1, RetryDelay::Crdt2, RetryDelay::Crdt3]
                    [usize::from(crd)],
                more,
                dnr,
            };
            let cqe = CompletionEntry::new(cid, sq_id, sq_head, status, phase, dw0);
            prop_assert_eq!(cqe.status(), status);
            prop_assert_eq!(cqe.phase(), phase);
            prop_assert_eq!((cqe.cid, cqe.sq_id, cqe.sq_head, cqe.dw0), (cid, sq_id, sq_head, dw0));
            prop_assert_eq!(cqe.status().sct.bits(), sct);
        }
    }
}
