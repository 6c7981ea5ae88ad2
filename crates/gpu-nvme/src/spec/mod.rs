//! NVMe wire structures: the commands, completions, data pointers and identify pages that every
//! controller of the family (swarmio's emulator, the file-backed controller, VFIO) and every host
//! (CPU threads, GPU threads through `cuda/nvme_spec.cuh`) exchange through queue pairs.
//!
//! Implements NVMe Base Specification 2.x (§4.1 submission queue entry, §4.2 completion queue
//! entry and status field, §4.1.1 PRPs, §5 admin commands, Identify data structures) and the NVM
//! Command Set Specification 1.x (§3 I/O commands, §4 Identify Namespace), the layer that
//! `ARCHITECTURE.md` ("Everything speaks NVMe") and GeminiFS §3.2 (shared NVMe driver) build on.
//!
//! The controllers here are software, so every byte they read from a queue, a PRP list or an
//! identify page is untrusted: parsing validates and returns errors, it never panics.
//!
//! Byte order: NVMe is little-endian on the wire. `#[repr(C)]` entries are shared in place with
//! GPU threads and device-visible memory, so this module requires a little-endian host (checked
//! at compile time below); the explicit `from_bytes`/`to_bytes` codecs are little-endian on any
//! host.

/// Declares a `#[repr(u8)]` enum of wire codes with `TryFrom<u8>` (unknown codes are an
/// [`UnknownCode`] error), `code()`, `name()` and `ALL`. Each variant's doc is its spec name.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal) {
            $( $variant:ident = $value:literal => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        $vis enum $name {
            $( #[doc = $text] $variant = $value ),+
        }

        impl $name {
            /// Every code, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The code as it appears on the wire.
            pub const fn code(self) -> u8 {
                self as u8
            }

            /// The name the specification gives this code.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl TryFrom<u8> for $name {
            type Error = super::UnknownCode;

            fn try_from(value: u8) -> Result<Self, super::UnknownCode> {
                match value {
                    $($value => Ok($name::$variant),)+
                    _ => Err(super::UnknownCode { kind: $kind, value }),
                }
            }
        }

        impl From<$name> for u8 {
            fn from(code: $name) -> u8 {
                code.code()
            }
        }
    };
}

mod command;
mod completion;
mod identify;
mod namespace;
mod prp;
mod status;

pub use command::{
    AdminOpcode, CommandError, DsmRange, FEATURE_NUMBER_OF_QUEUES, IoOpcode,
    MAX_BLOCKS_PER_COMMAND, MAX_DSM_RANGES, MAX_QUEUE_ENTRIES, QueueCounts, QueuePriority,
    SubmissionEntry,
};
pub use completion::CompletionEntry;
pub use identify::{
    AsciiText, CQES_16_BYTES, Cns, IDENTIFY_PAGE_SIZE, IdentifyController, IdentifyError,
    IdentifyNamespace, LbaFormatDescriptor, MAX_ACTIVE_NAMESPACES, NVME_VERSION_2_0, Nqn,
    ONCS_DATASET_MANAGEMENT, ONCS_WRITE_ZEROES, SQES_64_BYTES, VWC_PRESENT,
    active_namespace_list_page, parse_active_namespace_list,
};
pub use namespace::{GeometryError, LbaFormat, NamespaceGeometry, RangeError};
pub use prp::{
    DEFAULT_MAX_TRANSFER, MAX_PAGE_SIZE, MIN_PAGE_SIZE, PrpConfig, PrpConfigError, PrpError,
    PrpList, PrpPlan, PrpWalkError, prp_segments,
};
pub use status::{
    CommandSpecificStatus, GenericStatus, MediaStatus, RetryDelay, Status, StatusCodeType,
    StatusError,
};

// The `#[repr(C)]` entries are read and written in place by GPU threads and software
// controllers; their integer fields are only wire-correct on a little-endian host.
const _: () = assert!(
    cfg!(target_endian = "little"),
    "NVMe queue entries are shared in place: a little-endian host is required"
);

/// A wire code that this module does not know (an opcode, status code or CNS value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:#04x}")]
pub struct UnknownCode {
    /// Which kind of code it was meant to be.
    pub kind: &'static str,
    /// The value found on the wire.
    pub value: u8,
}

/// Little-endian field access on fixed-size wire buffers. Offsets are constants of the layout,
/// always in bounds of the arrays they are used on.
mod le {
    pub(super) fn u16_at(bytes: &[u8], offset: usize) -> u16 {
        u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
    }

    pub(super) fn u32_at(bytes: &[u8], offset: usize) -> u32 {
        let mut word = [0; 4];
        word.copy_from_slice(&bytes[offset..offset + 4]);
        u32::from_le_bytes(word)
    }

    pub(super) fn u64_at(bytes: &[u8], offset: usize) -> u64 {
        let mut word = [0; 8];
        word.copy_from_slice(&bytes[offset..offset + 8]);
        u64::from_le_bytes(word)
    }

    pub(super) fn put_u16(bytes: &mut [u8], offset: usize, value: u16) {
        bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
    }

    pub(super) fn put_u32(bytes: &mut [u8], offset: usize, value: u32) {
        bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
    }

    pub(super) fn put_u64(bytes: &mut [u8], offset: usize, value: u64) {
        bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    //! Cross-checks `cuda/nvme_spec.cuh` against this module, so the two cannot drift apart.

    use super::*;
    use core::mem::{offset_of, size_of};
    use std::collections::BTreeMap;

    const HEADER: &str = include_str!("../../cuda/nvme_spec.cuh");

    fn parse_number(text: &str) -> u64 {
        let text = text.trim().trim_end_matches(['u', 'U', 'l', 'L']);
        match text.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => text.parse(),
        }
        .unwrap_or_else(|_| panic!("not a number in header: {text:?}"))
    }

    /// `inline constexpr <type> NAME = VALUE;` lines of the header.
    fn header_constants() -> BTreeMap<String, u64> {
        HEADER
            .lines()
            .filter_map(|line| line.trim().strip_prefix("inline constexpr "))
            .map(|rest| {
                let (lhs, rhs) = rest.split_once('=').expect("constexpr without value");
                let name = lhs
                    .split_whitespace()
                    .last()
                    .expect("constexpr without name");
                let value = rhs.split(';').next().expect("constexpr without ';'");
                (name.to_string(), parse_number(value))
            })
            .collect()
    }

    /// `static_assert(NVME_OFFSETOF(S, F) == N, ...)` and
    /// `static_assert(sizeof(S) == N, ...)` lines of the header.
    fn header_layout() -> BTreeMap<(String, String), u64> {
        HEADER
            .lines()
            .filter_map(|line| line.trim().strip_prefix("static_assert("))
            .map(|rest| {
                let (lhs, rhs) = rest.split_once("==").expect("static_assert without ==");
                let value = parse_number(rhs.split(',').next().expect("static_assert message"));
                let key = if let Some(args) = lhs.trim().strip_prefix("NVME_OFFSETOF(") {
                    let (ty, field) = args.trim_end_matches([')', ' ']).split_once(',').unwrap();
                    (ty.trim().to_string(), field.trim().to_string())
                } else {
                    let ty = lhs
                        .trim()
                        .strip_prefix("sizeof(")
                        .expect("unknown static_assert");
                    (
                        ty.trim_end_matches([')', ' ']).to_string(),
                        "sizeof".to_string(),
                    )
                };
                (key, value)
            })
            .collect()
    }

    fn rust_layout() -> BTreeMap<(String, String), u64> {
        macro_rules! fields {
            ($c:literal, $rust:ty, $($field:ident),+) => {
                [(($c.to_string(), "sizeof".to_string()), size_of::<$rust>() as u64)]
                    .into_iter()
                    .chain([$((
                        ($c.to_string(), stringify!($field).to_string()),
                        offset_of!($rust, $field) as u64,
                    )),+])
            };
        }
        fields!(
            "nvme_sqe",
            SubmissionEntry,
            cdw0,
            nsid,
            cdw2,
            cdw3,
            mptr,
            prp1,
            prp2,
            cdw10,
            cdw11,
            cdw12,
            cdw13,
            cdw14,
            cdw15
        )
        .chain(fields!(
            "nvme_cqe",
            CompletionEntry,
            dw0,
            dw1,
            sq_head,
            sq_id,
            cid,
            status
        ))
        .chain(fields!("nvme_dsm_range", DsmRange, attributes, nlb, slba))
        .collect()
    }

    fn rust_constants() -> BTreeMap<String, u64> {
        let mut expected = BTreeMap::new();
        let mut put = |name: &str, value: u64| {
            assert!(
                expected.insert(name.to_string(), value).is_none(),
                "{name} twice"
            );
        };
        let snake = |text: &str| {
            let mut out = String::new();
            for (i, ch) in text.chars().enumerate() {
                if ch.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_uppercase());
            }
            out
        };
        for op in AdminOpcode::ALL {
            put(
                &format!("NVME_ADMIN_OPC_{}", snake(&format!("{op:?}"))),
                op.code().into(),
            );
        }
        for op in IoOpcode::ALL {
            put(
                &format!("NVME_OPC_{}", snake(&format!("{op:?}"))),
                op.code().into(),
            );
        }
        for code in GenericStatus::ALL {
            put(
                &format!("NVME_SC_{}", snake(&format!("{code:?}"))),
                code.code().into(),
            );
        }
        for code in CommandSpecificStatus::ALL {
            put(
                &format!("NVME_SC_CS_{}", snake(&format!("{code:?}"))),
                code.code().into(),
            );
        }
        for code in MediaStatus::ALL {
            put(
                &format!("NVME_SC_MEDIA_{}", snake(&format!("{code:?}"))),
                code.code().into(),
            );
        }
        for sct in [
            StatusCodeType::Generic,
            StatusCodeType::CommandSpecific,
            StatusCodeType::MediaAndDataIntegrity,
            StatusCodeType::PathRelated,
            StatusCodeType::VendorSpecific,
        ] {
            put(
                &format!("NVME_SCT_{}", snake(&format!("{sct:?}"))),
                sct.bits().into(),
            );
        }
        put("NVME_SQE_SIZE", size_of::<SubmissionEntry>() as u64);
        put("NVME_CQE_SIZE", size_of::<CompletionEntry>() as u64);
        put("NVME_MAX_BLOCKS_PER_COMMAND", MAX_BLOCKS_PER_COMMAND.into());
        put(
            "NVME_CQE_DW3_OFFSET",
            offset_of!(CompletionEntry, cid) as u64,
        );
        expected
    }

    #[test]
    fn cuda_header_constants_equal_the_rust_codes() {
        assert_eq!(header_constants(), rust_constants());
    }

    #[test]
    fn cuda_header_layout_asserts_equal_the_rust_layout() {
        assert_eq!(header_layout(), rust_layout());
    }
}
