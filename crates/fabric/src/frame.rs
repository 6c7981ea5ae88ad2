//! The pRPC wire format (PeakFS §III-D): every message is one frame, a fixed 24-byte
//! little-endian header followed by the payload.
//!
//! ```text
//! offset size field
//!      0    4 magic        b"pRPC"
//!      4    1 version      VERSION
//!      5    1 flags        Flags (REPLY, ...); unknown bits are rejected
//!      6    2 opcode       u16; 0xFF00..=0xFFFF are the transport's own (Opcode::ECHO, ...)
//!      8    8 request id   chosen by the client, echoed in the reply
//!     16    4 payload len  bytes after the header, at most the receiver's configured maximum
//!     20    4 header crc   crc32c of bytes 0..20, so garbage is caught before the payload
//! ```
//!
//! The header is checked as soon as its 24 bytes have arrived (before the payload), so a
//! corrupt or oversize length never makes a receiver wait for, or allocate, a bogus payload.
//! The payload itself is not checksummed: the transports below (TCP, RDMA RC) already are.

use std::fmt;

/// Size of the encoded header in bytes.
pub const HEADER_LEN: usize = 24;
/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"pRPC";
/// Wire format version this crate writes and accepts.
pub const VERSION: u8 = 1;
/// Default largest payload a receiver accepts (16 MiB + 4 KiB: a large write plus its header).
pub const DEFAULT_MAX_PAYLOAD: u32 = (16 << 20) + 4096;

/// Bytes covered by the header checksum.
const CRC_COVERED: usize = 20;

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// bad magic {found:02x?} (expected "pRPC")
    #[error("bad magic {found:02x?} (expected \"pRPC\")")]
    BadMagic {
        /// The magic bytes received (as many as had arrived).
        found: Vec<u8>,
    },
    /// unsupported frame version {found} (this build speaks VERSION)
    #[error("unsupported frame version {found} (this build speaks {VERSION})")]
    BadVersion {
        /// Version byte received.
        found: u8,
    },
    /// header checksum mismatch: header says {stored:#010x}, bytes hash to {computed:#010x}
    #[error("header checksum mismatch: header says {stored:#010x}, bytes hash to {computed:#010x}")]
    BadChecksum {
        /// Checksum carried by the header.
        stored: u32,
        /// Checksum of the received header bytes.
        computed: u32,
    },
    /// unknown flag bits {bits:#04x}
    #[error("unknown flag bits {bits:#04x}")]
    BadFlags {
        /// The flag bits this version does not define.
        bits: u8,
    },
    /// payload length {len} exceeds the maximum {max}
    #[error("payload length {len} exceeds the maximum {max}")]
    Oversize {
        /// Length claimed by the header.
        len: u32,
        /// Configured maximum of the receiver.
        max: u32,
    },
    /// error-reply payload of {len} bytes is shorter than its 4-byte code
    #[error("error-reply payload of {len} bytes is shorter than its 4-byte code")]
    ShortErrorReply {
        /// Payload length received.
        len: usize,
    },
    /// a message of {len} bytes does not hold exactly one frame
    #[error("a message of {len} bytes does not hold exactly one frame")]
    MessageLength {
        /// Bytes the message (one RDMA RECV) held.
        len: usize,
    },
    /// error-reply message is not UTF-8
    #[error("error-reply message is not UTF-8")]
    ErrorMessageNotUtf8,
}

/// An RPC operation code. Values are chosen by the crate's user (PeakFS defines its own), except
/// the range [`Opcode::TRANSPORT_FIRST`]`..=0xFFFF`, which this crate reserves.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Opcode(pub u16);

impl Opcode {
    /// First opcode of the range reserved for transport-level messages.
    pub const TRANSPORT_FIRST: u16 = 0xFF00;
    /// Echo: the reply carries the request's payload unchanged (health checks, the echo ceiling).
    pub const ECHO: Opcode = Opcode(0xFF00);
    /// Error reply: the payload is an [`ErrorCode`] and a UTF-8 message ([`encode_error`]).
    pub const ERROR: Opcode = Opcode(0xFF01);
    /// Goodbye: the sender closes the connection after this frame; no reply.
    pub const GOODBYE: Opcode = Opcode(0xFF02);

    /// True for opcodes in the range this crate reserves.
    pub fn is_transport(self) -> bool {
        self.0 >= Self::TRANSPORT_FIRST
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Opcode::ECHO => f.write_str("ECHO"),
            Opcode::ERROR => f.write_str("ERROR"),
            Opcode::GOODBYE => f.write_str("GOODBYE"),
            Opcode(code) => write!(f, "Opcode({code:#06x})"),
        }
    }
}

/// Frame flag bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// No flag set: a request.
    pub const NONE: Flags = Flags(0);
    /// The frame answers the request with the same id.
    pub const REPLY: Flags = Flags(1);
    /// Every bit this version defines.
    const KNOWN: u8 = 1;

    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// Flags from raw bits; `None` if a bit this version does not define is set.
    pub fn from_bits(bits: u8) -> Option<Flags> {
        (bits & !Self::KNOWN == 0).then_some(Flags(bits))
    }

    /// True if every bit of `other` is set in `self`.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The decoded fixed header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// What the frame asks for (or answers).
    pub opcode: Opcode,
    /// Request/reply and future flags.
    pub flags: Flags,
    /// Client-chosen id that pairs a reply with its request.
    pub request_id: u64,
    /// Bytes of payload after the header.
    pub payload_len: u32,
}

impl Header {
    /// A request header.
    pub fn request(opcode: Opcode, request_id: u64, payload_len: u32) -> Header {
        Header {
            opcode,
            flags: Flags::NONE,
            request_id,
            payload_len,
        }
    }

    /// A reply header for the request with `request_id`.
    pub fn reply(opcode: Opcode, request_id: u64, payload_len: u32) -> Header {
        Header {
            opcode,
            flags: Flags::REPLY,
            request_id,
            payload_len,
        }
    }

    /// True if this header answers a request.
    pub fn is_reply(&self) -> bool {
        self.flags.contains(Flags::REPLY)
    }

    /// The 24 header bytes, checksum included.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.flags.bits();
        out[6..8].copy_from_slice(&self.opcode.0.to_le_bytes());
        out[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        out[16..20].copy_from_slice(&self.payload_len.to_le_bytes());
        let crc = common::hash::crc32c(&out[..CRC_COVERED]);
        out[20..24].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Checks and decodes 24 header bytes; payloads over `max_payload` are refused.
    pub fn decode(bytes: &[u8; HEADER_LEN], max_payload: u32) -> Result<Header, FrameError> {
        if bytes[0..4] != MAGIC {
            return Err(FrameError::BadMagic {
                found: bytes[0..4].to_vec(),
            });
        }
        if bytes[4] != VERSION {
            return Err(FrameError::BadVersion { found: bytes[4] });
        }
        let stored = u32::from_le_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
        let computed = common::hash::crc32c(&bytes[..CRC_COVERED]);
        if stored != computed {
            return Err(FrameError::BadChecksum { stored, computed });
        }
        let flags = Flags::from_bits(bytes[5]).ok_or(FrameError::BadFlags {
            bits: bytes[5] & !Flags::KNOWN,
        })?;
        let opcode = Opcode(u16::from_le_bytes([bytes[6], bytes[7]]));
        let mut id = [0u8; 8];
        id.copy_from_slice(&bytes[8..16]);
        let request_id = u64::from_le_bytes(id);
        let payload_len = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        if payload_len > max_payload {
            return Err(FrameError::Oversize {
                len: payload_len,
                max: max_payload,
            });
        }
        Ok(Header {
            opcode,
            flags,
            request_id,
            payload_len,
        })
    }

    /// Header plus payload length in bytes.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.payload_len as usize
    }
}

/// Outcome of [`decode`] on a buffer that may hold a partial frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// At least this many more bytes are needed before a frame can be decoded.
    Need(usize),
    /// A whole frame: its header, its payload, and the bytes it took from the buffer's start.
    Frame {
        /// The checked header.
        header: Header,
        /// The payload, borrowed from the buffer.
        payload: &'a [u8],
        /// Bytes consumed (header plus payload).
        consumed: usize,
    },
}

/// Decodes the frame at the start of `buf`. Garbage is reported as early as it can be seen: a
/// wrong magic prefix even before the whole header has arrived, a bad header (version, flags,
/// checksum, length over `max_payload`) before its payload has. Never panics.
pub fn decode(buf: &[u8], max_payload: u32) -> Result<Decoded<'_>, FrameError> {
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        let prefix = &buf[..buf.len().min(MAGIC.len())];
        if prefix != &MAGIC[..prefix.len()] {
            return Err(FrameError::BadMagic {
                found: prefix.to_vec(),
            });
        }
        return Ok(Decoded::Need(HEADER_LEN - buf.len()));
    };
    let header = Header::decode(head, max_payload)?;
    let total = header.frame_len();
    match buf.get(HEADER_LEN..total) {
        Some(payload) => Ok(Decoded::Frame {
            header,
            payload,
            consumed: total,
        }),
        None => Ok(Decoded::Need(total - buf.len())),
    }
}

/// Error codes carried by [`Opcode::ERROR`] replies. Codes below [`ErrorCode::USER_FIRST`] are
/// the transport's; users define their own from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// The request frame could not be decoded (bad magic, version, flags or checksum).
    pub const MALFORMED: ErrorCode = ErrorCode(1);
    /// The server does not implement the opcode.
    pub const UNKNOWN_OPCODE: ErrorCode = ErrorCode(2);
    /// The payload length is over the server's maximum.
    pub const OVERSIZE: ErrorCode = ErrorCode(3);
    /// The server is shutting down.
    pub const SHUTTING_DOWN: ErrorCode = ErrorCode(4);
    /// The handler failed without a more specific code.
    pub const INTERNAL: ErrorCode = ErrorCode(5);
    /// First code free for users of the crate.
    pub const USER_FIRST: u32 = 0x1_0000;

    /// The transport error code that reports `error` to the peer.
    pub fn for_frame_error(error: &FrameError) -> ErrorCode {
        match error {
            FrameError::Oversize { .. } => ErrorCode::OVERSIZE,
            _ => ErrorCode::MALFORMED,
        }
    }
}

/// Appends the payload of an [`Opcode::ERROR`] reply (code, then the UTF-8 message) to `out`.
pub fn encode_error(code: ErrorCode, message: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&code.0.to_le_bytes());
    out.extend_from_slice(message.as_bytes());
}

/// Parses the payload of an [`Opcode::ERROR`] reply.
pub fn decode_error(payload: &[u8]) -> Result<(ErrorCode, &str), FrameError> {
    let Some((code, message)) = payload.split_first_chunk::<4>() else {
        return Err(FrameError::ShortErrorReply { len: payload.len() });
    };
    let message = std::str::from_utf8(message).map_err(|_| FrameError::ErrorMessageNotUtf8)?;
    Ok((ErrorCode(u32::from_le_bytes(*code)), message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame_bytes(header: &Header, payload: &[u8]) -> Vec<u8> {
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(payload);
        bytes
    }

    fn any_header(payload_len: u32) -> impl Strategy<Value = Header> {
        (any::<u16>(), any::<bool>(), any::<u64>()).prop_map(move |(op, reply, id)| Header {
            opcode: Opcode(op),
            flags: if reply { Flags::REPLY } else { Flags::NONE },
            request_id: id,
            payload_len,
        })
    }

    fn header_and_payload() -> impl Strategy<Value = (Header, Vec<u8>)> {
        proptest::collection::vec(any::<u8>(), 0..600).prop_flat_map(|payload| {
            any_header(payload.len() as u32).prop_map(move |header| (header, payload.clone()))
        })
    }

    proptest! {
        #[test]
        fn encoded_frames_decode_to_themselves((header, payload) in header_and_payload()) {
            let bytes = frame_bytes(&header, &payload);
            let decoded = decode(&bytes, DEFAULT_MAX_PAYLOAD).unwrap();
            prop_assert_eq!(
                decoded,
                Decoded::Frame { header, payload: &payload, consumed: bytes.len() }
            );
        }

        #[test]
        fn every_prefix_of_a_frame_asks_for_exactly_the_missing_bytes(
            (header, payload) in header_and_payload(),
            split in any::<prop::sample::Index>(),
        ) {
            let bytes = frame_bytes(&header, &payload);
            let cut = split.index(bytes.len());
            let need = if cut < HEADER_LEN { HEADER_LEN - cut } else { bytes.len() - cut };
            prop_assert_eq!(decode(&bytes[..cut], DEFAULT_MAX_PAYLOAD), Ok(Decoded::Need(need)));
        }

        #[test]
        fn two_back_to_back_frames_decode_in_order(
            (h1, p1) in header_and_payload(),
            (h2, p2) in header_and_payload(),
        ) {
            let mut bytes = frame_bytes(&h1, &p1);
            bytes.extend_from_slice(&frame_bytes(&h2, &p2));
            let Ok(Decoded::Frame { header, consumed, .. }) = decode(&bytes, u32::MAX) else {
                panic!("first frame did not decode");
            };
            prop_assert_eq!(header, h1);
            let Ok(Decoded::Frame { header, payload, .. }) = decode(&bytes[consumed..], u32::MAX)
            else {
                panic!("second frame did not decode");
            };
            prop_assert_eq!(header, h2);
            prop_assert_eq!(payload, &p2[..]);
        }

        #[test]
        fn random_bytes_never_panic_and_frames_stay_in_bounds(
            bytes in proptest::collection::vec(any::<u8>(), 0..256),
            max in any::<u32>(),
        ) {
            if let Ok(Decoded::Frame { header, payload, consumed }) = decode(&bytes, max) {
                prop_assert!(consumed <= bytes.len());
                prop_assert_eq!(payload.len(), header.payload_len as usize);
                prop_assert!(header.payload_len <= max);
            }
        }

        #[test]
        fn any_single_bit_flip_in_the_header_is_rejected(
            (header, payload) in header_and_payload(),
            bit in 0..HEADER_LEN * 8,
        ) {
            let mut bytes = frame_bytes(&header, &payload);
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode(&bytes, DEFAULT_MAX_PAYLOAD).is_err());
        }

        #[test]
        fn error_payloads_round_trip(code in any::<u32>(), message in ".{0,40}") {
            let mut payload = Vec::new();
            encode_error(ErrorCode(code), &message, &mut payload);
            prop_assert_eq!(decode_error(&payload), Ok((ErrorCode(code), message.as_str())));
        }
    }

    #[test]
    fn oversize_length_is_rejected_before_the_payload_arrives() {
        let header = Header::request(Opcode(7), 1, 4097);
        assert_eq!(
            decode(&header.encode(), 4096),
            Err(FrameError::Oversize {
                len: 4097,
                max: 4096
            })
        );
    }

    #[test]
    fn wrong_magic_is_rejected_from_its_first_byte() {
        assert!(matches!(decode(b"G", 64), Err(FrameError::BadMagic { .. })));
        assert!(matches!(
            decode(b"GET / HTTP/1.1\r\n", 64),
            Err(FrameError::BadMagic { .. })
        ));
        assert_eq!(decode(b"pR", 64), Ok(Decoded::Need(HEADER_LEN - 2)));
    }

    #[test]
    fn wrong_version_and_unknown_flags_are_named() {
        let mut bytes = Header::request(Opcode(1), 9, 0).encode();
        bytes[4] = 2;
        assert_eq!(decode(&bytes, 64), Err(FrameError::BadVersion { found: 2 }));

        let mut bytes = Header::request(Opcode(1), 9, 0).encode();
        bytes[5] = 0x81;
        let crc = common::hash::crc32c(&bytes[..CRC_COVERED]);
        bytes[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode(&bytes, 64), Err(FrameError::BadFlags { bits: 0x80 }));
    }

    #[test]
    fn short_or_non_utf8_error_payloads_are_rejected() {
        assert_eq!(
            decode_error(&[1, 2]),
            Err(FrameError::ShortErrorReply { len: 2 })
        );
        assert_eq!(
            decode_error(&[1, 0, 0, 0, 0xff]),
            Err(FrameError::ErrorMessageNotUtf8)
        );
    }

    #[test]
    fn transport_opcodes_are_in_the_reserved_range() {
        for op in [Opcode::ECHO, Opcode::ERROR, Opcode::GOODBYE] {
            assert!(op.is_transport());
        }
        assert!(!Opcode(0xFEFF).is_transport());
    }
}
