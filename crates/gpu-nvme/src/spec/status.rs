//! Completion status field (NVMe Base 2.x §4.2.3): the 15 bits above the phase tag in CQE
//! dword 3, with the generic (§4.2.3.1), command specific (§4.2.3.2) and media and data
//! integrity (§4.2.3.3) status codes our controllers report.

use core::fmt;

use super::UnknownCode;

/// Status Code Type (SCT): bits 8-10 of the status field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum StatusCodeType {
    /// Generic command status (§4.2.3.1).
    Generic = 0,
    /// Command specific status (§4.2.3.2).
    CommandSpecific = 1,
    /// Media and data integrity errors (§4.2.3.3).
    MediaAndDataIntegrity = 2,
    /// Path related status (§4.2.3.4).
    PathRelated = 3,
    /// Reserved type 4.
    Reserved4 = 4,
    /// Reserved type 5.
    Reserved5 = 5,
    /// Reserved type 6.
    Reserved6 = 6,
    /// Vendor specific status.
    VendorSpecific = 7,
}

impl StatusCodeType {
    /// The 3-bit value on the wire.
    pub const fn bits(self) -> u8 {
        self as u8
    }

    /// Decodes the low 3 bits of `bits`; every 3-bit value is a type.
    const fn from_low_bits(bits: u16) -> Self {
        match bits & 0x7 {
            0 => Self::Generic,
            1 => Self::CommandSpecific,
            2 => Self::MediaAndDataIntegrity,
            3 => Self::PathRelated,
            4 => Self::Reserved4,
            5 => Self::Reserved5,
            6 => Self::Reserved6,
            _ => Self::VendorSpecific,
        }
    }
}

/// Command Retry Delay (CRD): which of Identify Controller's CRDT1..3 delays the host should wait
/// before retrying; bits 11-12 of the status field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum RetryDelay {
    /// Retry at once.
    #[default]
    None = 0,
    /// Wait Command Retry Delay Time 1.
    Crdt1 = 1,
    /// Wait Command Retry Delay Time 2.
    Crdt2 = 2,
    /// Wait Command Retry Delay Time 3.
    Crdt3 = 3,
}

impl RetryDelay {
    /// The 2-bit value on the wire.
    pub const fn bits(self) -> u8 {
        self as u8
    }

    const fn from_low_bits(bits: u16) -> Self {
        match bits & 0x3 {
            0 => Self::None,
            1 => Self::Crdt1,
            2 => Self::Crdt2,
            _ => Self::Crdt3,
        }
    }
}

wire_enum! {
    /// Generic command status codes (SCT 0).
    pub enum GenericStatus ("generic status code") {
        Success = 0x00 => "Successful Completion",
        InvalidOpcode = 0x01 => "Invalid Command Opcode",
        InvalidField = 0x02 => "Invalid Field in Command",
        CommandIdConflict = 0x03 => "Command ID Conflict",
        DataTransferError = 0x04 => "Data Transfer Error",
        AbortedPowerLoss = 0x05 => "Commands Aborted due to Power Loss Notification",
        InternalError = 0x06 => "Internal Error",
        AbortRequested = 0x07 => "Command Abort Requested",
        AbortedSqDeletion = 0x08 => "Command Aborted due to SQ Deletion",
        InvalidNamespace = 0x0B => "Invalid Namespace or Format",
        PrpOffsetInvalid = 0x13 => "PRP Offset Invalid",
        LbaOutOfRange = 0x80 => "LBA Out of Range",
        CapacityExceeded = 0x81 => "Capacity Exceeded",
        NamespaceNotReady = 0x82 => "Namespace Not Ready",
    }
}

impl GenericStatus {
    /// Whether a controller sets Do Not Retry with this code: the same command would fail again.
    pub const fn do_not_retry(self) -> bool {
        !matches!(
            self,
            Self::Success
                | Self::DataTransferError
                | Self::AbortedPowerLoss
                | Self::InternalError
                | Self::AbortRequested
                | Self::AbortedSqDeletion
                | Self::NamespaceNotReady
        )
    }
}

wire_enum! {
    /// Command specific status codes (SCT 1) of the admin queue commands we implement.
    pub enum CommandSpecificStatus ("command specific status code") {
        CompletionQueueInvalid = 0x00 => "Completion Queue Invalid",
        InvalidQueueIdentifier = 0x01 => "Invalid Queue Identifier",
        InvalidQueueSize = 0x02 => "Invalid Queue Size",
        AbortCommandLimitExceeded = 0x03 => "Abort Command Limit Exceeded",
        InvalidInterruptVector = 0x08 => "Invalid Interrupt Vector",
        InvalidLogPage = 0x09 => "Invalid Log Page",
        InvalidQueueDeletion = 0x0C => "Invalid Queue Deletion",
    }
}

impl CommandSpecificStatus {
    /// Whether a controller sets Do Not Retry with this code (all of these are host errors).
    pub const fn do_not_retry(self) -> bool {
        true
    }
}

wire_enum! {
    /// Media and data integrity error codes (SCT 2).
    pub enum MediaStatus ("media status code") {
        WriteFault = 0x80 => "Write Fault",
        UnrecoveredReadError = 0x81 => "Unrecovered Read Error",
        CompareFailure = 0x85 => "Compare Failure",
        AccessDenied = 0x86 => "Access Denied",
        DeallocatedOrUnwritten = 0x87 => "Deallocated or Unwritten Logical Block",
    }
}

impl MediaStatus {
    /// Whether a controller sets Do Not Retry with this code: access is denied for good, media
    /// errors may clear on retry.
    pub const fn do_not_retry(self) -> bool {
        matches!(self, Self::AccessDenied)
    }
}

/// The status field of a completion: what happened to a command.
///
/// Every 15-bit field value decodes to exactly one `Status` and back ([`Status::from_field`],
/// [`Status::to_field`]), including reserved and vendor specific codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    /// Status Code Type.
    pub sct: StatusCodeType,
    /// Status Code, interpreted according to `sct`.
    pub sc: u8,
    /// Command Retry Delay.
    pub crd: RetryDelay,
    /// More: extra information is available in the Error Information log page.
    pub more: bool,
    /// Do Not Retry: resubmitting the same command is expected to fail.
    pub dnr: bool,
}

/// A value that does not fit the 15-bit status field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StatusError {
    /// status field {0:#x} is wider than 15 bits
    #[error("status field {0:#x} is wider than 15 bits")]
    FieldTooWide(u16),
}

const SC_SHIFT: u16 = 0;
const SCT_SHIFT: u16 = 8;
const CRD_SHIFT: u16 = 11;
const MORE_BIT: u16 = 1 << 13;
const DNR_BIT: u16 = 1 << 14;
const FIELD_MASK: u16 = 0x7FFF;

impl Status {
    /// Successful completion.
    pub const SUCCESS: Status = Status::generic(GenericStatus::Success);

    /// A status of type `sct` with code `sc`, no retry delay, More and DNR clear.
    pub const fn new(sct: StatusCodeType, sc: u8) -> Status {
        Status {
            sct,
            sc,
            crd: RetryDelay::None,
            more: false,
            dnr: false,
        }
    }

    /// A generic status, DNR set when retrying cannot help ([`GenericStatus::do_not_retry`]).
    pub const fn generic(code: GenericStatus) -> Status {
        Status::new(StatusCodeType::Generic, code as u8).with_dnr(code.do_not_retry())
    }

    /// A command specific status, DNR set ([`CommandSpecificStatus::do_not_retry`]).
    pub const fn command_specific(code: CommandSpecificStatus) -> Status {
        Status::new(StatusCodeType::CommandSpecific, code as u8).with_dnr(code.do_not_retry())
    }

    /// A media and data integrity status, DNR per [`MediaStatus::do_not_retry`].
    pub const fn media(code: MediaStatus) -> Status {
        Status::new(StatusCodeType::MediaAndDataIntegrity, code as u8).with_dnr(code.do_not_retry())
    }

    /// This status with Do Not Retry set to `dnr`.
    pub const fn with_dnr(self, dnr: bool) -> Status {
        Status { dnr, ..self }
    }

    /// Invalid Command Opcode (DNR).
    pub const fn invalid_opcode() -> Status {
        Status::generic(GenericStatus::InvalidOpcode)
    }

    /// Invalid Field in Command (DNR).
    pub const fn invalid_field() -> Status {
        Status::generic(GenericStatus::InvalidField)
    }

    /// Data Transfer Error (retryable).
    pub const fn data_transfer_error() -> Status {
        Status::generic(GenericStatus::DataTransferError)
    }

    /// Internal Error (retryable).
    pub const fn internal_error() -> Status {
        Status::generic(GenericStatus::InternalError)
    }

    /// Invalid Namespace or Format (DNR).
    pub const fn invalid_namespace() -> Status {
        Status::generic(GenericStatus::InvalidNamespace)
    }

    /// LBA Out of Range (DNR).
    pub const fn lba_out_of_range() -> Status {
        Status::generic(GenericStatus::LbaOutOfRange)
    }

    /// Invalid Queue Identifier (DNR).
    pub const fn invalid_queue_identifier() -> Status {
        Status::command_specific(CommandSpecificStatus::InvalidQueueIdentifier)
    }

    /// Invalid Queue Size (DNR).
    pub const fn invalid_queue_size() -> Status {
        Status::command_specific(CommandSpecificStatus::InvalidQueueSize)
    }

    /// Completion Queue Invalid (DNR).
    pub const fn completion_queue_invalid() -> Status {
        Status::command_specific(CommandSpecificStatus::CompletionQueueInvalid)
    }

    /// Invalid Queue Deletion: a CQ still has SQs attached (DNR).
    pub const fn invalid_queue_deletion() -> Status {
        Status::command_specific(CommandSpecificStatus::InvalidQueueDeletion)
    }

    /// Capacity Exceeded: the namespace has no room for the data (DNR).
    pub const fn capacity_exceeded() -> Status {
        Status::generic(GenericStatus::CapacityExceeded)
    }

    /// Write Fault (retryable).
    pub const fn write_fault() -> Status {
        Status::media(MediaStatus::WriteFault)
    }

    /// Unrecovered Read Error (retryable).
    pub const fn unrecovered_read_error() -> Status {
        Status::media(MediaStatus::UnrecoveredReadError)
    }

    /// Whether the command succeeded (generic type, code 0; More/DNR/CRD do not matter).
    pub const fn is_success(self) -> bool {
        matches!(self.sct, StatusCodeType::Generic) && self.sc == 0
    }

    /// The 15-bit status field (CQE dword 3 bits 17-31, shifted down by one).
    pub const fn to_field(self) -> u16 {
        let mut field = ((self.sc as u16) << SC_SHIFT)
            | ((self.sct.bits() as u16) << SCT_SHIFT)
            | ((self.crd.bits() as u16) << CRD_SHIFT);
        if self.more {
            field |= MORE_BIT;
        }
        if self.dnr {
            field |= DNR_BIT;
        }
        field
    }

    /// Decodes a 15-bit status field; a value with bit 15 set is not a status field.
    pub const fn from_field(field: u16) -> Result<Status, StatusError> {
        if field & !FIELD_MASK != 0 {
            return Err(StatusError::FieldTooWide(field));
        }
        Ok(Status::from_field_bits(field))
    }

    /// Decodes the low 15 bits of `field`; every such value is a status.
    pub(super) const fn from_field_bits(field: u16) -> Status {
        Status {
            sct: StatusCodeType::from_low_bits(field >> SCT_SHIFT),
            sc: ((field >> SC_SHIFT) & 0xFF) as u8,
            crd: RetryDelay::from_low_bits(field >> CRD_SHIFT),
            more: field & MORE_BIT != 0,
            dnr: field & DNR_BIT != 0,
        }
    }

    /// The specification's name for this code, if it is one this module knows.
    pub fn name(self) -> Option<&'static str> {
        let known: Result<&'static str, UnknownCode> = match self.sct {
            StatusCodeType::Generic => GenericStatus::try_from(self.sc).map(GenericStatus::name),
            StatusCodeType::CommandSpecific => {
                CommandSpecificStatus::try_from(self.sc).map(CommandSpecificStatus::name)
            }
            StatusCodeType::MediaAndDataIntegrity => {
                MediaStatus::try_from(self.sc).map(MediaStatus::name)
            }
            _ => return None,
        };
        known.ok()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name().unwrap_or("Unknown Status"))?;
        write!(f, " (SCT {:#x}, SC {:#04x}", self.sct.bits(), self.sc)?;
        if self.crd != RetryDelay::None {
            write!(f, ", CRD {}", self.crd.bits())?;
        }
        if self.more {
            f.write_str(", More")?;
        }
        if self.dnr {
            f.write_str(", DNR")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn field_bit_positions_follow_the_spec() {
        // LBA Out of Range with DNR: SC 0x80 in bits 0-7, SCT 0 in 8-10, DNR bit 14.
        assert_eq!(Status::lba_out_of_range().to_field(), 0x4080);
        // Invalid Queue Size: SCT 1 at bit 8, SC 0x02, DNR.
        assert_eq!(Status::invalid_queue_size().to_field(), 0x4102);
        // Write Fault: SCT 2, SC 0x80, retryable.
        assert_eq!(Status::write_fault().to_field(), 0x0280);
        let all = Status {
            sct: StatusCodeType::VendorSpecific,
            sc: 0xFF,
            crd: RetryDelay::Crdt3,
            more: true,
            dnr: true,
        };
        assert_eq!(all.to_field(), 0x7FFF);
        assert_eq!(Status::SUCCESS.to_field(), 0);
    }

    #[test]
    fn only_generic_code_zero_is_success() {
        assert!(Status::SUCCESS.is_success());
        assert!(Status::SUCCESS.with_dnr(true).is_success());
        assert!(!Status::new(StatusCodeType::CommandSpecific, 0).is_success());
        assert!(!Status::invalid_field().is_success());
    }

    #[test]
    fn permanent_errors_carry_dnr_and_transient_ones_do_not() {
        assert!(Status::invalid_opcode().dnr);
        assert!(Status::lba_out_of_range().dnr);
        assert!(Status::invalid_queue_identifier().dnr);
        assert!(!Status::internal_error().dnr);
        assert!(!Status::data_transfer_error().dnr);
        assert!(!Status::unrecovered_read_error().dnr);
        const { assert!(!Status::SUCCESS.dnr) };
    }

    #[test]
    fn field_wider_than_15_bits_is_rejected() {
        assert_eq!(
            Status::from_field(0x8000),
            Err(StatusError::FieldTooWide(0x8000))
        );
    }

    #[test]
    fn display_names_the_code_and_flags() {
        assert_eq!(
            Status::lba_out_of_range().to_string(),
            "LBA Out of Range (SCT 0x0, SC 0x80, DNR)"
        );
        let odd = Status {
            crd: RetryDelay::Crdt2,
            more: true,
            ..Status::new(StatusCodeType::Reserved5, 7)
        };
        assert_eq!(
            odd.to_string(),
            "Unknown Status (SCT 0x5, SC 0x07, CRD 2, More)"
        );
    }

    #[test]
    fn every_named_code_decodes_to_itself() {
        for &code in GenericStatus::ALL {
            assert_eq!(GenericStatus::try_from(code.code()), Ok(code));
            assert_eq!(Status::generic(code).name(), Some(code.name()));
        }
        for &code in CommandSpecificStatus::ALL {
            assert_eq!(CommandSpecificStatus::try_from(code.code()), Ok(code));
            assert_eq!(Status::command_specific(code).name(), Some(code.name()));
        }
        for &code in MediaStatus::ALL {
            assert_eq!(MediaStatus::try_from(code.code()), Ok(code));
            assert_eq!(Status::media(code).name(), Some(code.name()));
        }
        assert!(GenericStatus::try_from(0x7F).is_err());
    }

    proptest! {
        #[test]
        fn every_15_bit_field_roundtrips(field in 0u16..0x8000) {
            let status = Status::from_field(field).unwrap();
            prop_assert_eq!(status.to_field(), field);
        }

        #[test]
        fn every_status_roundtrips_through_its_field(
            sct in 0u16..8, sc: u8, crd in 0u16..4, more: bool, dnr: bool,
        ) {
            let status = Status {
                sct: StatusCodeType::from_low_bits(sct),
                sc,
                crd: RetryDelay::from_low_bits(crd),
                more,
                dnr,
            };
            prop_assert_eq!(Status::from_field(status.to_field()), Ok(status));
        }
    }
}
