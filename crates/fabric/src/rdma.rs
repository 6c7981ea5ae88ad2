//! The RDMA verbs transport of pRPC (PeakFS §III-D: RC queue pairs, SEND/RECV for RPC frames,
//! one-sided READ/WRITE into registered user buffers for end-to-end zero copy; GNStor §4.2:
//! pre-registered memory pools instead of per-I/O registration).
//!
//! This module holds the parts that need no device, so they build and are tested everywhere:
//! the side-channel handshake that exchanges QP information over TCP (no rdma_cm needed), the
//! send-ring slot accounting, work-request id encoding, the registered-memory table that
//! decides whether a payload can be sent without a copy, the remote-buffer descriptor carried in
//! RPC payloads, and the check of a received message. The verbs code itself (`verbs`, feature
//! `rdma`, built on the `sideway` crate) opens the device, creates the RC QPs and moves bytes.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::frame::{self, Decoded, FrameError, HEADER_LEN, Header};
use crate::transport::TransportError;

#[cfg(feature = "rdma")]
pub mod verbs;

/// Size of one side-channel handshake message.
pub const HANDSHAKE_LEN: usize = 64;
/// First bytes of a handshake message.
const HANDSHAKE_MAGIC: [u8; 4] = *b"pRDM";
/// Handshake version this crate speaks.
const HANDSHAKE_VERSION: u8 = 1;
/// Largest value of 24-bit fields (QP numbers, packet sequence numbers).
const MAX_24BIT: u32 = (1 << 24) - 1;
/// Most receive slots one side may advertise.
pub const MAX_RECV_SLOTS: u32 = 1 << 16;
/// Largest receive slot (a frame larger than this goes by RDMA READ/WRITE instead).
pub const MAX_SLOT_SIZE: u32 = 1 << 20;

/// Why a handshake message, work request id or registration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RdmaError {
    /// handshake message has bad magic {0:02x?}
    #[error("handshake message has bad magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// handshake version {0} is not supported (this build speaks 1)
    #[error("handshake version {0} is not supported (this build speaks 1)")]
    BadVersion(u8),
    /// handshake checksum mismatch: message says {stored:#010x}, bytes hash to {computed:#010x}
    #[error(
        "handshake checksum mismatch: message says {stored:#010x}, bytes hash to {computed:#010x}"
    )]
    BadChecksum {
        /// Checksum in the message.
        stored: u32,
        /// Checksum of the bytes.
        computed: u32,
    },
    /// handshake field {field} = {value} is out of range
    #[error("handshake field {field} = {value} is out of range")]
    OutOfRange {
        /// Field name.
        field: &'static str,
        /// Value received.
        value: u64,
    },
    /// work request id {0:#x} names no known operation
    #[error("work request id {0:#x} names no known operation")]
    BadWorkRequestId(u64),
    /// send completion for slot {got}, but the oldest send in flight is {expected:?}
    #[error("send completion for slot {got}, but the oldest send in flight is {expected:?}")]
    OutOfOrderCompletion {
        /// Slot completed.
        got: u32,
        /// Oldest slot in flight, if any.
        expected: Option<u32>,
    },
    /// memory region {base:#x}+{len} overlaps a registered one
    #[error("memory region {base:#x}+{len} overlaps a registered one")]
    Overlap {
        /// Start address.
        base: usize,
        /// Length in bytes.
        len: usize,
    },
    /// memory region {base:#x}+{len} is empty or wraps the address space
    #[error("memory region {base:#x}+{len} is empty or wraps the address space")]
    BadRegion {
        /// Start address.
        base: usize,
        /// Length in bytes.
        len: usize,
    },
    /// remote buffer descriptor needs 16 bytes, got {0}
    #[error("remote buffer descriptor needs 16 bytes, got {0}")]
    ShortRemoteBuf(usize),
}

/// What each side of an RC connection tells the other over the TCP side channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// Queue pair number (24 bits).
    pub qp_num: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Port GID (RoCE addressing).
    pub gid: [u8; 16],
    /// Receive slots posted for the peer's SENDs (the peer's send window).
    pub recv_slots: u32,
    /// Bytes per receive slot: the largest frame (header + payload) one SEND may carry.
    pub slot_size: u32,
}

impl QpInfo {
    /// The 64-byte message: magic, version, LID, QPN, PSN, slots, slot size, GID, crc32c.
    pub fn encode(&self) -> [u8; HANDSHAKE_LEN] {
        let mut out = [0u8; HANDSHAKE_LEN];
        out[0..4].copy_from_slice(&HANDSHAKE_MAGIC);
        out[4] = HANDSHAKE_VERSION;
        out[6..8].copy_from_slice(&self.lid.to_le_bytes());
        out[8..12].copy_from_slice(&self.qp_num.to_le_bytes());
        out[12..16].copy_from_slice(&self.psn.to_le_bytes());
        out[16..20].copy_from_slice(&self.recv_slots.to_le_bytes());
        out[20..24].copy_from_slice(&self.slot_size.to_le_bytes());
        out[24..40].copy_from_slice(&self.gid);
        let crc = common::hash::crc32c(&out[..60]);
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Checks and decodes a handshake message from the peer.
    pub fn decode(bytes: &[u8; HANDSHAKE_LEN]) -> Result<QpInfo, RdmaError> {
        let word = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if magic != HANDSHAKE_MAGIC {
            return Err(RdmaError::BadMagic(magic));
        }
        if bytes[4] != HANDSHAKE_VERSION {
            return Err(RdmaError::BadVersion(bytes[4]));
        }
        let (stored, computed) = (word(60), common::hash::crc32c(&bytes[..60]));
        if stored != computed {
            return Err(RdmaError::BadChecksum { stored, computed });
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&bytes[24..40]);
        let info = QpInfo {
            lid: u16::from_le_bytes([bytes[6], bytes[7]]),
            qp_num: word(8),
            psn: word(12),
            recv_slots: word(16),
            slot_size: word(20),
            gid,
        };
        let check = |field, value: u32, range: Range<u32>| {
            if range.contains(&value) {
                Ok(())
            } else {
                Err(RdmaError::OutOfRange {
                    field,
                    value: u64::from(value),
                })
            }
        };
        check("qp_num", info.qp_num, 1..MAX_24BIT + 1)?;
        check("psn", info.psn, 0..MAX_24BIT + 1)?;
        check("recv_slots", info.recv_slots, 1..MAX_RECV_SLOTS + 1)?;
        check(
            "slot_size",
            info.slot_size,
            HEADER_LEN as u32..MAX_SLOT_SIZE + 1,
        )?;
        Ok(info)
    }
}

/// What a work request id names: kind in the top two bits, slot or operation number below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrId {
    /// A SEND from send-ring slot n.
    Send(u32),
    /// A RECV into receive slot n.
    Recv(u32),
    /// A one-sided READ or WRITE, numbered by the connection.
    OneSided(u32),
}

impl WrId {
    const SHIFT: u32 = 62;

    /// The 64-bit id posted with the work request.
    pub fn encode(self) -> u64 {
        let (kind, n) = match self {
            WrId::Send(n) => (1u64, n),
            WrId::Recv(n) => (2, n),
            WrId::OneSided(n) => (3, n),
        };
        kind << Self::SHIFT | u64::from(n)
    }

    /// The id of a completion; ids this crate never posts are refused.
    pub fn decode(id: u64) -> Result<WrId, RdmaError> {
        let n = u32::try_from(id & ((1 << Self::SHIFT) - 1))
            .map_err(|_| RdmaError::BadWorkRequestId(id))?;
        match id >> Self::SHIFT {
            1 => Ok(WrId::Send(n)),
            2 => Ok(WrId::Recv(n)),
            3 => Ok(WrId::OneSided(n)),
            _ => Err(RdmaError::BadWorkRequestId(id)),
        }
    }
}

/// Slot accounting of a registered send ring: a slot is reused only after its SEND completed.
/// RC send queues complete in posting order, so the ring is a FIFO of in-flight slots.
#[derive(Debug, Clone)]
pub struct SendRing {
    slots: u32,
    /// Slots ever acquired.
    head: u64,
    /// Slots ever completed.
    tail: u64,
}

impl SendRing {
    /// A ring of `slots` (at least 1) slots, all free.
    pub fn new(slots: u32) -> Self {
        SendRing {
            slots: slots.max(1),
            head: 0,
            tail: 0,
        }
    }

    /// Takes the next free slot, or `None` if every slot awaits its completion.
    pub fn acquire(&mut self) -> Option<u32> {
        (self.in_flight() < self.slots).then(|| {
            let slot = (self.head % u64::from(self.slots)) as u32;
            self.head += 1;
            slot
        })
    }

    /// Frees `slot` on its SEND completion; it must be the oldest in flight.
    pub fn complete(&mut self, slot: u32) -> Result<(), RdmaError> {
        let expected = (self.in_flight() > 0).then(|| (self.tail % u64::from(self.slots)) as u32);
        if expected != Some(slot) {
            return Err(RdmaError::OutOfOrderCompletion {
                got: slot,
                expected,
            });
        }
        self.tail += 1;
        Ok(())
    }

    /// SENDs posted and not yet completed.
    pub fn in_flight(&self) -> u32 {
        (self.head - self.tail) as u32
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }
}

/// Identifies a registered region in a [`MrTable`] (its start address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MrId(pub usize);

/// Local and remote keys of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrKeys {
    /// Key for local scatter/gather entries.
    pub lkey: u32,
    /// Key the peer uses for one-sided access.
    pub rkey: u32,
}

/// The memory regions registered with a protection domain, by address, so a payload slice can
/// be sent straight from user memory (its lkey found here) instead of being copied into the send
/// ring (PeakFS: "the user buffer ... can be used as a network buffer without copy").
#[derive(Debug, Default, Clone)]
pub struct MrTable {
    regions: BTreeMap<usize, (usize, MrKeys)>,
}

impl MrTable {
    /// Records region `base..base + len`; regions may not overlap.
    pub fn insert(&mut self, base: usize, len: usize, keys: MrKeys) -> Result<MrId, RdmaError> {
        let end = base
            .checked_add(len)
            .filter(|_| len > 0)
            .ok_or(RdmaError::BadRegion { base, len })?;
        let before = self.regions.range(..end).next_back();
        if before.is_some_and(|(&start, &(length, _))| start + length > base) {
            return Err(RdmaError::Overlap { base, len });
        }
        self.regions.insert(base, (len, keys));
        Ok(MrId(base))
    }

    /// Forgets a region (after deregistration); true if it was there.
    pub fn remove(&mut self, id: MrId) -> bool {
        self.regions.remove(&id.0).is_some()
    }

    /// The region holding all of `addr..addr + len`, if one does.
    pub fn find(&self, addr: usize, len: usize) -> Option<(MrId, MrKeys)> {
        let end = addr.checked_add(len)?;
        let (&start, &(length, keys)) = self.regions.range(..=addr).next_back()?;
        (end <= start + length).then_some((MrId(start), keys))
    }

    /// Number of regions.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// True if no region is registered.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
}

/// A buffer of the peer that this side may READ from or WRITE into (sent in RPC payloads: a
/// read request names the client's buffer, the server WRITEs the data there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Address in the peer's registered region.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// The region's remote key.
    pub rkey: u32,
}

impl RemoteBuf {
    /// Encoded size.
    pub const LEN: usize = 16;

    /// Little-endian address, length, rkey.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..8].copy_from_slice(&self.addr.to_le_bytes());
        out[8..12].copy_from_slice(&self.len.to_le_bytes());
        out[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        out
    }

    /// Decodes the first 16 bytes of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<RemoteBuf, RdmaError> {
        let raw = bytes
            .first_chunk::<{ Self::LEN }>()
            .ok_or(RdmaError::ShortRemoteBuf(bytes.len()))?;
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&raw[0..8]);
        Ok(RemoteBuf {
            addr: u64::from_le_bytes(addr),
            len: u32::from_le_bytes([raw[8], raw[9], raw[10], raw[11]]),
            rkey: u32::from_le_bytes([raw[12], raw[13], raw[14], raw[15]]),
        })
    }
}

/// Checks the bytes one RECV completion delivered: exactly one whole frame, whose payload is at
/// the returned range. SEND/RECV preserves message boundaries, so anything else is malformed.
pub fn decode_message(
    bytes: &[u8],
    max_payload: u32,
) -> Result<(Header, Range<usize>), TransportError> {
    match frame::decode(bytes, max_payload)? {
        Decoded::Frame {
            header, consumed, ..
        } if consumed == bytes.len() => Ok((header, HEADER_LEN..consumed)),
        Decoded::Frame { .. } | Decoded::Need(_) => {
            Err(FrameError::MessageLength { len: bytes.len() }.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Opcode;
    use proptest::prelude::*;

    fn any_info() -> impl Strategy<Value = QpInfo> {
        (
            1..=MAX_24BIT,
            0..=MAX_24BIT,
            any::<u16>(),
            any::<[u8; 16]>(),
            1..=MAX_RECV_SLOTS,
            24..=MAX_SLOT_SIZE,
        )
            .prop_map(|(qp_num, psn, lid, gid, recv_slots, slot_size)| QpInfo {
                qp_num,
                psn,
                lid,
                gid,
                recv_slots,
                slot_size,
            })
    }

    proptest! {
        #[test]
        fn handshake_messages_round_trip(info in any_info()) {
            prop_assert_eq!(QpInfo::decode(&info.encode()), Ok(info));
        }

        #[test]
        fn any_corrupted_handshake_byte_is_rejected(info in any_info(), at in 0..HANDSHAKE_LEN, flip in 1..=255u8) {
            let mut bytes = info.encode();
            bytes[at] ^= flip;
            prop_assert!(QpInfo::decode(&bytes).is_err());
        }

        #[test]
        fn random_handshake_bytes_never_panic(bytes in any::<[u8; 32]>(), rest in any::<[u8; 32]>()) {
            let mut message = [0u8; HANDSHAKE_LEN];
            message[..32].copy_from_slice(&bytes);
            message[32..].copy_from_slice(&rest);
            let _ = QpInfo::decode(&message);
        }

        #[test]
        fn work_request_ids_round_trip(n in any::<u32>(), kind in 0..3u8) {
            let id = [WrId::Send(n), WrId::Recv(n), WrId::OneSided(n)][usize::from(kind)];
            prop_assert_eq!(WrId::decode(id.encode()), Ok(id));
        }

        #[test]
        fn send_ring_never_hands_out_a_slot_in_flight(ops in proptest::collection::vec(any::<bool>(), 0..200)) {
            let mut ring = SendRing::new(5);
            let mut in_flight = std::collections::VecDeque::new();
            for acquire in ops {
                if acquire {
                    match ring.acquire() {
                        Some(slot) => {
                            prop_assert!(!in_flight.contains(&slot));
                            in_flight.push_back(slot);
                        }
                        None => prop_assert_eq!(in_flight.len(), 5),
                    }
                } else if let Some(oldest) = in_flight.pop_front() {
                    prop_assert_eq!(ring.complete(oldest), Ok(()));
                }
                prop_assert_eq!(ring.in_flight() as usize, in_flight.len());
            }
        }

        #[test]
        fn mr_table_finds_exactly_the_ranges_inside_a_region(
            regions in proptest::collection::vec((0usize..64, 1usize..16), 0..8),
            addr in 0usize..1200,
            len in 0usize..40,
        ) {
            let mut table = MrTable::default();
            let mut accepted = Vec::new();
            for (slot, len) in regions {
                let base = slot * 8;
                let keys = MrKeys { lkey: slot as u32, rkey: 100 + slot as u32 };
                let overlaps = accepted.iter().any(|&(b, l): &(usize, usize)| base < b + l && b < base + len);
                match table.insert(base, len, keys) {
                    Ok(_) => { prop_assert!(!overlaps); accepted.push((base, len)); }
                    Err(error) => { prop_assert!(overlaps); prop_assert_eq!(error, RdmaError::Overlap { base, len }); }
                }
            }
            let inside = accepted.iter().find(|&&(b, l)| addr >= b && addr + len <= b + l);
            let found = table.find(addr, len);
            prop_assert_eq!(found.map(|(id, keys)| (id.0, keys.lkey as usize * 8)), inside.map(|&(b, _)| (b, b)));
        }

        #[test]
        fn remote_buffer_descriptors_round_trip(addr in any::<u64>(), len in any::<u32>(), rkey in any::<u32>()) {
            let buf = RemoteBuf { addr, len, rkey };
            prop_assert_eq!(RemoteBuf::decode(&buf.encode()), Ok(buf));
        }
    }

    #[test]
    fn out_of_range_handshake_fields_are_named() {
        let info = QpInfo {
            qp_num: 7,
            psn: 1,
            lid: 0,
            gid: [0; 16],
            recv_slots: 0,
            slot_size: 4096,
        };
        assert_eq!(
            QpInfo::decode(&info.encode()),
            Err(RdmaError::OutOfRange {
                field: "recv_slots",
                value: 0
            })
        );
        let info = QpInfo {
            psn: 1 << 24,
            recv_slots: 4,
            ..info
        };
        assert_eq!(
            QpInfo::decode(&info.encode()),
            Err(RdmaError::OutOfRange {
                field: "psn",
                value: 1 << 24
            })
        );
    }

    #[test]
    fn completions_out_of_posting_order_are_refused() {
        let mut ring = SendRing::new(3);
        assert_eq!(
            ring.complete(0),
            Err(RdmaError::OutOfOrderCompletion {
                got: 0,
                expected: None
            })
        );
        let (a, b) = (ring.acquire().unwrap(), ring.acquire().unwrap());
        assert_eq!(
            ring.complete(b),
            Err(RdmaError::OutOfOrderCompletion {
                got: b,
                expected: Some(a)
            })
        );
        assert_eq!(ring.complete(a), Ok(()));
        assert_eq!(ring.complete(b), Ok(()));
    }

    #[test]
    fn unknown_work_request_kinds_are_refused() {
        assert_eq!(WrId::decode(5), Err(RdmaError::BadWorkRequestId(5)));
    }

    #[test]
    fn a_received_message_must_be_exactly_one_frame() {
        let mut bytes = Header::request(Opcode(4), 1, 3).encode().to_vec();
        bytes.extend_from_slice(b"abc");
        let (header, payload) = decode_message(&bytes, 64).unwrap();
        assert_eq!((header.request_id, &bytes[payload]), (1, &b"abc"[..]));
        assert!(matches!(
            decode_message(&bytes[..bytes.len() - 1], 64),
            Err(TransportError::Frame(FrameError::MessageLength { len: 26 }))
        ));
        bytes.push(0);
        assert!(decode_message(&bytes, 64).is_err());
        assert!(matches!(
            decode_message(b"junk", 64),
            Err(TransportError::Frame(_))
        ));
    }

    #[test]
    fn empty_or_wrapping_regions_are_refused() {
        let keys = MrKeys { lkey: 1, rkey: 2 };
        let mut table = MrTable::default();
        assert_eq!(
            table.insert(10, 0, keys),
            Err(RdmaError::BadRegion { base: 10, len: 0 })
        );
        assert_eq!(
            table.insert(usize::MAX, 2, keys),
            Err(RdmaError::BadRegion {
                base: usize::MAX,
                len: 2
            })
        );
        let id = table.insert(4096, 4096, keys).unwrap();
        assert_eq!(table.find(4096 + 100, 10), Some((id, keys)));
        assert!(table.remove(id));
        assert_eq!(table.find(4096 + 100, 10), None);
    }
}
