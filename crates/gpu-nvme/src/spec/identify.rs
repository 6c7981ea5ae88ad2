//! Identify data structures (NVMe Base 2.x §5.17.2: Identify Controller, CNS 01h, and Active
//! Namespace ID list, CNS 02h; NVM Command Set 1.x §4.1.5.1: Identify Namespace, CNS 00h):
//! the 4 KiB pages a controller returns and a host reads to learn the controller's limits and
//! each namespace's size and block format. Only the fields our controllers and hosts use are
//! modelled; the rest are zero when built and ignored when parsed.

use super::le;
use super::namespace::{GeometryError, LbaFormat, NamespaceGeometry};

/// Size of every Identify data structure.
pub const IDENTIFY_PAGE_SIZE: usize = 4096;
/// ONCS bit 2: the controller supports Dataset Management.
pub const ONCS_DATASET_MANAGEMENT: u16 = 1 << 2;
/// ONCS bit 3: the controller supports Write Zeroes.
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;
/// VWC bit 0: a volatile write cache is present (Flush matters).
pub const VWC_PRESENT: u8 = 1 << 0;
/// SQES: required and maximum SQ entry size are both 2^6 = 64 bytes.
pub const SQES_64_BYTES: u8 = 0x66;
/// CQES: required and maximum CQ entry size are both 2^4 = 16 bytes.
pub const CQES_16_BYTES: u8 = 0x44;
/// VER of NVMe 2.0.0: major in bits 16-31, minor in 8-15, tertiary in 0-7.
pub const NVME_VERSION_2_0: u32 = 0x0002_0000;
/// Most IDs one Active Namespace ID list page holds.
pub const MAX_ACTIVE_NAMESPACES: usize = IDENTIFY_PAGE_SIZE / 4;

wire_enum! {
    /// Controller or Namespace Structure: which Identify data structure a command asks for.
    pub enum Cns ("CNS value") {
        Namespace = 0x00 => "Identify Namespace data structure for the specified NSID",
        Controller = 0x01 => "Identify Controller data structure",
        ActiveNamespaceList = 0x02 => "Active Namespace ID list",
    }
}

/// Byte offsets of the Identify Controller fields we model.
mod controller_offset {
    pub(super) const VID: usize = 0;
    pub(super) const SSVID: usize = 2;
    pub(super) const SN: usize = 4;
    pub(super) const MN: usize = 24;
    pub(super) const FR: usize = 64;
    pub(super) const RAB: usize = 72;
    pub(super) const IEEE: usize = 73;
    pub(super) const MDTS: usize = 77;
    pub(super) const CNTLID: usize = 78;
    pub(super) const VER: usize = 80;
    pub(super) const SQES: usize = 512;
    pub(super) const CQES: usize = 513;
    pub(super) const MAXCMD: usize = 514;
    pub(super) const NN: usize = 516;
    pub(super) const ONCS: usize = 520;
    pub(super) const VWC: usize = 525;
    pub(super) const SGLS: usize = 536;
    pub(super) const SUBNQN: usize = 768;
}

/// Byte offsets of the Identify Namespace fields we model.
mod namespace_offset {
    pub(super) const NSZE: usize = 0;
    pub(super) const NCAP: usize = 8;
    pub(super) const NUSE: usize = 16;
    pub(super) const NSFEAT: usize = 24;
    pub(super) const NLBAF: usize = 25;
    pub(super) const FLBAS: usize = 26;
    pub(super) const LBAF: usize = 128;
}

/// Identify data that is malformed or describes something we do not support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdentifyError {
    /// identify data of {0} bytes is shorter than a 4096-byte page
    #[error("identify data of {0} bytes is shorter than a 4096-byte page")]
    TooShort(usize),
    /// text of {len} bytes does not fit a {max}-byte field
    #[error("text of {len} bytes does not fit a {max}-byte field")]
    TextTooLong {
        /// Length of the text.
        len: usize,
        /// Capacity of the field.
        max: usize,
    },
    /// text is not printable ASCII
    #[error("text is not printable ASCII")]
    TextNotPrintable,
    /// NLBAF {0} declares more than 64 LBA formats
    #[error("NLBAF {0} declares more than 64 LBA formats")]
    TooManyLbaFormats(u8),
    /// formatted LBA format {index} is not among the {count} formats declared
    #[error("formatted LBA format {index} is not among the {count} formats declared")]
    FormatIndexOutOfRange {
        /// FLBAS format index.
        index: u8,
        /// Formats declared (NLBAF + 1).
        count: u8,
    },
    /// LBA formats with {0} bytes of metadata are not supported
    #[error("LBA formats with {0} bytes of metadata are not supported")]
    MetadataUnsupported(u16),
    /// unusable namespace geometry: {0}
    #[error("unusable namespace geometry: {0}")]
    Geometry(#[from] GeometryError),
    /// {0} namespace IDs do not fit one list page of 1024
    #[error("{0} namespace IDs do not fit one list page of 1024")]
    TooManyNamespaces(usize),
    /// namespace ID {0:#x} cannot be in a namespace list (0, broadcast, or out of order)
    #[error("namespace ID {0:#x} cannot be in a namespace list (0, broadcast, or out of order)")]
    BadNamespaceListEntry(u32),
}

fn is_printable(text: &[u8]) -> bool {
    text.iter().all(|byte| (0x20..=0x7E).contains(byte))
}

fn page_of(bytes: &[u8]) -> Result<&[u8; IDENTIFY_PAGE_SIZE], IdentifyError> {
    bytes
        .first_chunk()
        .ok_or(IdentifyError::TooShort(bytes.len()))
}

/// The `N` bytes at `offset`, one of the constant field offsets inside the page.
fn field<const N: usize>(page: &[u8; IDENTIFY_PAGE_SIZE], offset: usize) -> [u8; N] {
    let mut bytes = [0; N];
    bytes.copy_from_slice(&page[offset..offset + N]);
    bytes
}

/// A fixed-size ASCII field padded with spaces (serial number, model number, firmware
/// revision); holds only printable ASCII.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsciiText<const N: usize>([u8; N]);

impl<const N: usize> AsciiText<N> {
    /// `text` (printable ASCII, at most `N` bytes) padded with spaces.
    pub fn new(text: &str) -> Result<Self, IdentifyError> {
        let bytes = text.as_bytes();
        if bytes.len() > N {
            return Err(IdentifyError::TextTooLong {
                len: bytes.len(),
                max: N,
            });
        }
        let mut field = [b' '; N];
        field[..bytes.len()].copy_from_slice(bytes);
        Self::from_field(&field)
    }

    /// Validates a field as read from an Identify page.
    pub fn from_field(field: &[u8; N]) -> Result<Self, IdentifyError> {
        if !is_printable(field) {
            return Err(IdentifyError::TextNotPrintable);
        }
        Ok(Self(*field))
    }

    /// The text without its padding.
    pub fn as_str(&self) -> &str {
        // Printable ASCII is always UTF-8.
        core::str::from_utf8(&self.0)
            .unwrap_or_default()
            .trim_end_matches(' ')
    }

    /// The field with its padding, as on the wire.
    pub const fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }
}

impl<const N: usize> Default for AsciiText<N> {
    /// All spaces: an empty field.
    fn default() -> Self {
        Self([b' '; N])
    }
}

/// An NVMe Qualified Name (SUBNQN): at most 223 bytes in a 256-byte NUL-padded field. We accept
/// printable ASCII only, which every NQN we generate is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Nqn(String);

impl Nqn {
    /// Longest NQN the specification allows, in bytes.
    pub const MAX_LEN: usize = 223;
    const FIELD_LEN: usize = 256;

    /// `name` as an NQN (printable ASCII, at most 223 bytes; may be empty).
    pub fn new(name: &str) -> Result<Self, IdentifyError> {
        if name.len() > Self::MAX_LEN {
            return Err(IdentifyError::TextTooLong {
                len: name.len(),
                max: Self::MAX_LEN,
            });
        }
        if !is_printable(name.as_bytes()) {
            return Err(IdentifyError::TextNotPrintable);
        }
        Ok(Self(name.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn from_field(field: &[u8; Self::FIELD_LEN]) -> Result<Self, IdentifyError> {
        let len = field
            .iter()
            .position(|&byte| byte == 0)
            .unwrap_or(Self::FIELD_LEN);
        let text =
            core::str::from_utf8(&field[..len]).map_err(|_| IdentifyError::TextNotPrintable)?;
        Self::new(text)
    }
}

/// Identify Controller data structure (CNS 01h), the fields we use. `Default` is all zero
/// (blank text), a placeholder until a controller's page is read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct IdentifyController {
    /// PCI Vendor ID.
    pub vid: u16,
    /// PCI Subsystem Vendor ID.
    pub ssvid: u16,
    /// Serial Number.
    pub serial_number: AsciiText<20>,
    /// Model Number.
    pub model_number: AsciiText<40>,
    /// Firmware Revision.
    pub firmware_revision: AsciiText<8>,
    /// Recommended Arbitration Burst (log2 of commands).
    pub rab: u8,
    /// IEEE OUI Identifier, as its three bytes on the wire.
    pub ieee_oui: [u8; 3],
    /// Maximum Data Transfer Size: log2 of units of the minimum memory page size; 0 = no limit.
    pub mdts: u8,
    /// Controller ID.
    pub cntlid: u16,
    /// Version (see [`NVME_VERSION_2_0`]).
    pub version: u32,
    /// Submission Queue Entry Size (see [`SQES_64_BYTES`]).
    pub sqes: u8,
    /// Completion Queue Entry Size (see [`CQES_16_BYTES`]).
    pub cqes: u8,
    /// Maximum Outstanding Commands (0: not reported).
    pub maxcmd: u16,
    /// Number of Namespaces: the largest valid NSID.
    pub nn: u32,
    /// Optional NVM Command Support (see [`ONCS_DATASET_MANAGEMENT`], [`ONCS_WRITE_ZEROES`]).
    pub oncs: u16,
    /// Volatile Write Cache (see [`VWC_PRESENT`]).
    pub vwc: u8,
    /// SGL Support: 0, data pointers are always PRPs.
    pub sgls: u32,
    /// NVM Subsystem NVMe Qualified Name.
    pub subnqn: Nqn,
}

impl IdentifyController {
    /// A controller of `nn` namespaces with our defaults: NVMe 2.0, 64/16-byte entries, MDTS 9
    /// (2 MiB with 4 KiB pages, [`DEFAULT_MAX_TRANSFER`](super::DEFAULT_MAX_TRANSFER)), Write
    /// Zeroes and Dataset Management supported, a volatile write cache, no SGLs, zero IDs.
    pub fn new(
        serial_number: AsciiText<20>,
        model_number: AsciiText<40>,
        firmware_revision: AsciiText<8>,
        subnqn: Nqn,
        nn: u32,
    ) -> Self {
        Self {
            vid: 0,
            ssvid: 0,
            serial_number,
            model_number,
            firmware_revision,
            rab: 0,
            ieee_oui: [0; 3],
            mdts: 9,
            cntlid: 0,
            version: NVME_VERSION_2_0,
            sqes: SQES_64_BYTES,
            cqes: CQES_16_BYTES,
            maxcmd: 0,
            nn,
            oncs: ONCS_DATASET_MANAGEMENT | ONCS_WRITE_ZEROES,
            vwc: VWC_PRESENT,
            sgls: 0,
            subnqn,
        }
    }

    /// The 4096-byte page, unmodelled fields zero.
    pub fn to_page(&self) -> [u8; IDENTIFY_PAGE_SIZE] {
        use controller_offset as at;
        let mut page = [0; IDENTIFY_PAGE_SIZE];
        le::put_u16(&mut page[..], at::VID, self.vid);
        le::put_u16(&mut page[..], at::SSVID, self.ssvid);
        page[at::SN..at::SN + 20].copy_from_slice(self.serial_number.as_bytes());
        page[at::MN..at::MN + 40].copy_from_slice(self.model_number.as_bytes());
        page[at::FR..at::FR + 8].copy_from_slice(self.firmware_revision.as_bytes());
        page[at::RAB] = self.rab;
        page[at::IEEE..at::IEEE + 3].copy_from_slice(&self.ieee_oui);
        page[at::MDTS] = self.mdts;
        le::put_u16(&mut page[..], at::CNTLID, self.cntlid);
        le::put_u32(&mut page[..], at::VER, self.version);
        page[at::SQES] = self.sqes;
        page[at::CQES] = self.cqes;
        le::put_u16(&mut page[..], at::MAXCMD, self.maxcmd);
        le::put_u32(&mut page[..], at::NN, self.nn);
        le::put_u16(&mut page[..], at::ONCS, self.oncs);
        page[at::VWC] = self.vwc;
        le::put_u32(&mut page[..], at::SGLS, self.sgls);
        let nqn = self.subnqn.as_str().as_bytes();
        page[at::SUBNQN..at::SUBNQN + nqn.len()].copy_from_slice(nqn);
        page
    }

    /// Parses the first 4096 bytes of `bytes`; text fields must be printable ASCII.
    pub fn parse(bytes: &[u8]) -> Result<Self, IdentifyError> {
        use controller_offset as at;
        let page = page_of(bytes)?;
        Ok(Self {
            vid: le::u16_at(page, at::VID),
            ssvid: le::u16_at(page, at::SSVID),
            serial_number: AsciiText::from_field(&field(page, at::SN))?,
            model_number: AsciiText::from_field(&field(page, at::MN))?,
            firmware_revision: AsciiText::from_field(&field(page, at::FR))?,
            rab: page[at::RAB],
            ieee_oui: field(page, at::IEEE),
            mdts: page[at::MDTS],
            cntlid: le::u16_at(page, at::CNTLID),
            version: le::u32_at(page, at::VER),
            sqes: page[at::SQES],
            cqes: page[at::CQES],
            maxcmd: le::u16_at(page, at::MAXCMD),
            nn: le::u32_at(page, at::NN),
            oncs: le::u16_at(page, at::ONCS),
            vwc: page[at::VWC],
            sgls: le::u32_at(page, at::SGLS),
            subnqn: Nqn::from_field(&field(page, at::SUBNQN))?,
        })
    }

    /// Whether Write Zeroes is supported (ONCS bit 3).
    pub const fn supports_write_zeroes(&self) -> bool {
        self.oncs & ONCS_WRITE_ZEROES != 0
    }

    /// Whether Dataset Management is supported (ONCS bit 2).
    pub const fn supports_dataset_management(&self) -> bool {
        self.oncs & ONCS_DATASET_MANAGEMENT != 0
    }
}

/// One LBA Format descriptor (LBAF) of Identify Namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LbaFormatDescriptor {
    /// Metadata Size in bytes per block.
    pub ms: u16,
    /// LBA Data Size: log2 of the block size.
    pub lbads: u8,
    /// Relative Performance (bits 0-1; 0 is best).
    pub rp: u8,
}

/// Identify Namespace data structure (CNS 00h), the fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdentifyNamespace {
    /// Namespace Size in blocks.
    pub nsze: u64,
    /// Namespace Capacity in blocks.
    pub ncap: u64,
    /// Namespace Utilization in blocks.
    pub nuse: u64,
    /// Namespace Features.
    pub nsfeat: u8,
    /// Number of LBA Formats, 0-based (at most 63).
    pub nlbaf: u8,
    /// Formatted LBA Size: format index in bits 0-3 (low) and 5-6 (high).
    pub flbas: u8,
    /// LBA formats; entries past `nlbaf` are zero.
    pub lba_formats: [LbaFormatDescriptor; IdentifyNamespace::MAX_LBA_FORMATS],
}

impl IdentifyNamespace {
    /// Most LBA formats one namespace may list.
    pub const MAX_LBA_FORMATS: usize = 64;

    /// A namespace of `geometry`, fully allocated, with exactly one LBA format.
    pub fn from_geometry(geometry: &NamespaceGeometry) -> Self {
        let mut lba_formats = [LbaFormatDescriptor::default(); Self::MAX_LBA_FORMATS];
        lba_formats[0].lbads = geometry.format().lbads();
        Self {
            nsze: geometry.capacity_blocks(),
            ncap: geometry.capacity_blocks(),
            nuse: geometry.capacity_blocks(),
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            lba_formats,
        }
    }

    /// Index of the format the namespace is formatted with (FLBAS bits 0-3 and 5-6).
    pub const fn formatted_index(&self) -> u8 {
        (self.flbas & 0x0F) | ((self.flbas >> 1) & 0x30)
    }

    /// The 4096-byte page, unmodelled fields zero.
    pub fn to_page(&self) -> [u8; IDENTIFY_PAGE_SIZE] {
        use namespace_offset as at;
        let mut page = [0; IDENTIFY_PAGE_SIZE];
        le::put_u64(&mut page[..], at::NSZE, self.nsze);
        le::put_u64(&mut page[..], at::NCAP, self.ncap);
        le::put_u64(&mut page[..], at::NUSE, self.nuse);
        page[at::NSFEAT] = self.nsfeat;
        page[at::NLBAF] = self.nlbaf;
        page[at::FLBAS] = self.flbas;
        for (index, format) in self.lba_formats.iter().enumerate() {
            let offset = at::LBAF + 4 * index;
            le::put_u16(&mut page[..], offset, format.ms);
            page[offset + 2] = format.lbads;
            page[offset + 3] = format.rp;
        }
        page
    }

    /// Parses the first 4096 bytes of `bytes`: at most 64 formats, the formatted one among them.
    pub fn parse(bytes: &[u8]) -> Result<Self, IdentifyError> {
        use namespace_offset as at;
        let page = page_of(bytes)?;
        let nlbaf = page[at::NLBAF];
        if usize::from(nlbaf) >= Self::MAX_LBA_FORMATS {
            return Err(IdentifyError::TooManyLbaFormats(nlbaf));
        }
        let mut lba_formats = [LbaFormatDescriptor::default(); Self::MAX_LBA_FORMATS];
        for (index, format) in lba_formats.iter_mut().enumerate() {
            let offset = at::LBAF + 4 * index;
            *format = LbaFormatDescriptor {
                ms: le::u16_at(page, offset),
                lbads: page[offset + 2],
                rp: page[offset + 3],
            };
        }
        let namespace = Self {
            nsze: le::u64_at(page, at::NSZE),
            ncap: le::u64_at(page, at::NCAP),
            nuse: le::u64_at(page, at::NUSE),
            nsfeat: page[at::NSFEAT],
            nlbaf,
            flbas: page[at::FLBAS],
            lba_formats,
        };
        let index = namespace.formatted_index();
        if index > nlbaf {
            return Err(IdentifyError::FormatIndexOutOfRange {
                index,
                count: nlbaf + 1,
            });
        }
        Ok(namespace)
    }

    /// The geometry a host uses: the formatted LBA format (512 or 4096-byte blocks, no
    /// metadata) and NSZE blocks.
    pub fn geometry(&self) -> Result<NamespaceGeometry, IdentifyError> {
        // `formatted_index` is at most 0x3F, inside the 64 formats.
        let format = self.lba_formats[usize::from(self.formatted_index())];
        if format.ms != 0 {
            return Err(IdentifyError::MetadataUnsupported(format.ms));
        }
        Ok(NamespaceGeometry::new(
            LbaFormat::from_lbads(format.lbads)?,
            self.nsze,
        )?)
    }
}

/// The Active Namespace ID list page (CNS 02h) for `nsids`: strictly increasing valid IDs, at
/// most 1024, zero-terminated.
pub fn active_namespace_list_page(
    nsids: &[u32],
) -> Result<[u8; IDENTIFY_PAGE_SIZE], IdentifyError> {
    if nsids.len() > MAX_ACTIVE_NAMESPACES {
        return Err(IdentifyError::TooManyNamespaces(nsids.len()));
    }
    let mut page = [0; IDENTIFY_PAGE_SIZE];
    let mut previous = 0;
    for (index, &nsid) in nsids.iter().enumerate() {
        if nsid <= previous || nsid == u32::MAX {
            return Err(IdentifyError::BadNamespaceListEntry(nsid));
        }
        le::put_u32(&mut page[..], 4 * index, nsid);
        previous = nsid;
    }
    Ok(page)
}

/// Parses an Active Namespace ID list page: the IDs before the first zero, which must be
/// strictly increasing and not the broadcast ID.
pub fn parse_active_namespace_list(bytes: &[u8]) -> Result<Vec<u32>, IdentifyError> {
    let page = page_of(bytes)?;
    let mut nsids = Vec::new();
    let mut previous = 0;
    for entry in page.chunks_exact(4) {
        let nsid = le::u32_at(entry, 0);
        if nsid == 0 {
            break;
        }
        if nsid <= previous || nsid == u32::MAX {
            return Err(IdentifyError::BadNamespaceListEntry(nsid));
        }
        nsids.push(nsid);
        previous = nsid;
    }
    Ok(nsids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_controller() -> IdentifyController {
        let mut controller = IdentifyController::new(
            AsciiText::new("SWARM0001").unwrap(),
            AsciiText::new("swarmio emulated NVMe").unwrap(),
            AsciiText::new("0.1.0").unwrap(),
            Nqn::new("nqn.2024-01.io.gpu-storage:swarmio").unwrap(),
            4,
        );
        controller.vid = 0x1B36;
        controller.ssvid = 0x1AF4;
        controller.ieee_oui = [0x52, 0x54, 0x00];
        controller.cntlid = 0x0102;
        controller.maxcmd = 1024;
        controller
    }

    #[test]
    fn controller_page_puts_fields_at_spec_offsets() {
        let page = sample_controller().to_page();
        assert_eq!(&page[0..4], &[0x36, 0x1B, 0xF4, 0x1A], "VID, SSVID");
        assert_eq!(&page[4..24], b"SWARM0001           ", "SN space padded");
        assert_eq!(&page[24..45], b"swarmio emulated NVMe");
        assert!(page[45..64].iter().all(|&b| b == b' '));
        assert_eq!(&page[64..72], b"0.1.0   ");
        assert_eq!(&page[73..76], &[0x52, 0x54, 0x00], "IEEE");
        assert_eq!(
            (page[77], &page[78..80]),
            (9, &[0x02, 0x01][..]),
            "MDTS, CNTLID"
        );
        assert_eq!(&page[80..84], &[0, 0, 2, 0], "VER 2.0.0");
        assert_eq!((page[512], page[513]), (0x66, 0x44), "SQES, CQES");
        assert_eq!(&page[514..516], &1024u16.to_le_bytes(), "MAXCMD");
        assert_eq!(&page[516..520], &[4, 0, 0, 0], "NN");
        assert_eq!(
            &page[520..522],
            &[0b1100, 0],
            "ONCS: DSM bit 2, Write Zeroes bit 3"
        );
        assert_eq!(page[525], 1, "VWC");
        assert_eq!(&page[536..540], &[0; 4], "no SGLs");
        assert_eq!(&page[768..802], b"nqn.2024-01.io.gpu-storage:swarmio");
        assert!(page[802..1024].iter().all(|&b| b == 0), "SUBNQN NUL padded");
    }

    #[test]
    fn controller_page_roundtrips() {
        let controller = sample_controller();
        let parsed = IdentifyController::parse(&controller.to_page()[..]).unwrap();
        assert_eq!(parsed, controller);
        assert_eq!(parsed.serial_number.as_str(), "SWARM0001");
        assert!(parsed.supports_write_zeroes() && parsed.supports_dataset_management());
    }

    #[test]
    fn short_or_garbled_pages_are_rejected() {
        assert_eq!(
            IdentifyController::parse(&[0; 4095]),
            Err(IdentifyError::TooShort(4095))
        );
        assert_eq!(
            IdentifyNamespace::parse(&[]),
            Err(IdentifyError::TooShort(0))
        );
        assert_eq!(
            parse_active_namespace_list(&[0; 100]),
            Err(IdentifyError::TooShort(100))
        );
        let mut page = sample_controller().to_page();
        page[10] = 0;
        assert_eq!(
            IdentifyController::parse(&page[..]),
            Err(IdentifyError::TextNotPrintable)
        );
    }

    #[test]
    fn text_fields_validate_length_and_charset() {
        assert_eq!(
            AsciiText::<8>::new("123456789"),
            Err(IdentifyError::TextTooLong { len: 9, max: 8 })
        );
        assert_eq!(
            AsciiText::<8>::new("caf\u{e9}"),
            Err(IdentifyError::TextNotPrintable)
        );
        assert_eq!(
            AsciiText::<8>::new("tab\there"),
            Err(IdentifyError::TextNotPrintable)
        );
        assert_eq!(AsciiText::<8>::default().as_str(), "");
        assert!(Nqn::new(&"n".repeat(223)).is_ok());
        assert_eq!(
            Nqn::new(&"n".repeat(224)),
            Err(IdentifyError::TextTooLong { len: 224, max: 223 })
        );
    }

    #[test]
    fn namespace_page_puts_fields_at_spec_offsets() {
        let geometry = NamespaceGeometry::new(LbaFormat::Bytes4096, 0x1_0000_0002).unwrap();
        let page = IdentifyNamespace::from_geometry(&geometry).to_page();
        for offset in [0, 8, 16] {
            assert_eq!(&page[offset..offset + 8], &0x1_0000_0002u64.to_le_bytes());
        }
        assert_eq!(&page[24..27], &[0, 0, 0], "NSFEAT, NLBAF, FLBAS");
        assert_eq!(
            &page[128..132],
            &[0, 0, 12, 0],
            "LBAF0: MS 0, LBADS 12, RP 0"
        );
        let parsed = IdentifyNamespace::parse(&page[..]).unwrap();
        assert_eq!(parsed.geometry(), Ok(geometry));
    }

    #[test]
    fn namespace_parse_checks_the_format_table() {
        let geometry = NamespaceGeometry::new(LbaFormat::Bytes512, 1000).unwrap();
        let mut page = IdentifyNamespace::from_geometry(&geometry).to_page();
        page[25] = 64;
        assert_eq!(
            IdentifyNamespace::parse(&page[..]),
            Err(IdentifyError::TooManyLbaFormats(64))
        );
        page[25] = 1;
        page[26] = 2;
        assert_eq!(
            IdentifyNamespace::parse(&page[..]),
            Err(IdentifyError::FormatIndexOutOfRange { index: 2, count: 2 })
        );
        // FLBAS bits 5-6 are the high bits of the index: 0x20 selects format 16.
        page[25] = 16;
        page[26] = 0x20;
        page[128 + 4 * 16..128 + 4 * 16 + 4].copy_from_slice(&[8, 0, 9, 0]);
        let parsed = IdentifyNamespace::parse(&page[..]).unwrap();
        assert_eq!(parsed.formatted_index(), 16);
        assert_eq!(
            parsed.geometry(),
            Err(IdentifyError::MetadataUnsupported(8))
        );
    }

    #[test]
    fn namespace_geometry_rejects_unsupported_block_sizes() {
        let geometry = NamespaceGeometry::new(LbaFormat::Bytes512, 8).unwrap();
        let mut namespace = IdentifyNamespace::from_geometry(&geometry);
        namespace.lba_formats[0].lbads = 10;
        assert_eq!(
            namespace.geometry(),
            Err(GeometryError::UnsupportedLbads(10).into())
        );
        namespace.lba_formats[0].lbads = 9;
        namespace.nsze = 0;
        assert_eq!(namespace.geometry(), Err(GeometryError::Empty.into()));
    }

    #[test]
    fn active_namespace_list_is_increasing_and_zero_terminated() {
        let page = active_namespace_list_page(&[1, 2, 7]).unwrap();
        assert_eq!(
            &page[0..16],
            &[1, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(parse_active_namespace_list(&page[..]), Ok(vec![1, 2, 7]));
        assert_eq!(
            active_namespace_list_page(&[2, 2]),
            Err(IdentifyError::BadNamespaceListEntry(2))
        );
        assert_eq!(
            active_namespace_list_page(&[0]),
            Err(IdentifyError::BadNamespaceListEntry(0))
        );
        assert_eq!(
            active_namespace_list_page(&[u32::MAX]),
            Err(IdentifyError::BadNamespaceListEntry(u32::MAX))
        );
        let full: Vec<u32> = (1..=1024).collect();
        let page = active_namespace_list_page(&full).unwrap();
        assert_eq!(parse_active_namespace_list(&page[..]), Ok(full));
        assert_eq!(
            active_namespace_list_page(&(1..=1025).collect::<Vec<_>>()),
            Err(IdentifyError::TooManyNamespaces(1025))
        );
    }

    #[test]
    fn cns_values_follow_the_spec() {
        assert_eq!(
            [
                Cns::Namespace.code(),
                Cns::Controller.code(),
                Cns::ActiveNamespaceList.code()
            ],
            [0, 1, 2]
        );
        assert!(Cns::try_from(0x03).is_err());
    }

    fn page_strategy() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), IDENTIFY_PAGE_SIZE..IDENTIFY_PAGE_SIZE + 8)
    }

    proptest! {
        #[test]
        fn random_pages_parse_without_panic_and_reparse_identically(
            page in page_strategy(), make_text_valid: bool, make_formats_valid: bool,
        ) {
            // The two structures overlap (bytes 25-26 are MN in one, NLBAF/FLBAS in the other).
            let mut controller_page = page.clone();
            if make_text_valid {
                for byte in &mut controller_page[4..72] {
                    *byte = 0x20 + *byte % 95;
                }
                controller_page[768..1024].fill(0);
            }
            let mut namespace_page = page.clone();
            if make_formats_valid {
                namespace_page[25] %= 64;
                namespace_page[26] = 0;
            }
            let controller = IdentifyController::parse(&controller_page);
            if make_text_valid {
                prop_assert!(controller.is_ok());
            }
            if let Ok(controller) = controller {
                let page = controller.to_page();
                prop_assert_eq!(IdentifyController::parse(&page[..]), Ok(controller));
            }
            let namespace = IdentifyNamespace::parse(&namespace_page);
            if make_formats_valid {
                prop_assert!(namespace.is_ok());
            }
            if let Ok(namespace) = namespace {
                prop_assert_eq!(IdentifyNamespace::parse(&namespace.to_page()[..]), Ok(namespace));
                let _ = namespace.geometry();
            }
            if let Ok(nsids) = parse_active_namespace_list(&page) {
                let rebuilt = active_namespace_list_page(&nsids).unwrap();
                prop_assert_eq!(parse_active_namespace_list(&rebuilt[..]), Ok(nsids));
            }
        }

        #[test]
        fn built_controllers_roundtrip(
            vid: u16, ssvid: u16, rab: u8, ieee_oui: [u8; 3], mdts: u8, cntlid: u16,
            version: u32, sqes: u8, cqes: u8, maxcmd: u16, nn: u32, oncs: u16, vwc: u8, sgls: u32,
            serial in "[ -~]{0,20}", model in "[ -~]{0,40}", firmware in "[ -~]{0,8}",
            nqn in "[ -~]{0,223}",
        ) {
            let controller = IdentifyController {
                vid, ssvid, rab, ieee_oui, mdts, cntlid, version, sqes, cqes, maxcmd, nn, oncs,
                vwc, sgls,
                serial_number: AsciiText::new(&serial).unwrap(),
                model_number: AsciiText::new(&model).unwrap(),
                firmware_revision: AsciiText::new(&firmware).unwrap(),
                subnqn: Nqn::new(&nqn).unwrap(),
            };
            prop_assert_eq!(IdentifyController::parse(&controller.to_page()[..]), Ok(controller));
        }
    }
}
