//! Physical Region Page entries and lists (NVMe Base 2.x §4.1.1 "Physical Region Page Entry
//! and List"): how a command names the memory a transfer reads or writes.
//!
//! PRP1 holds the buffer's first address (dword aligned, any offset in its memory page). When the
//! buffer ends within the next page PRP2 is that page's address; when it spans more pages PRP2
//! points to a PRP list of page addresses (offset 0 each), and a list that does not fit in the
//! rest of its page continues in another page named by the page's last entry.
//!
//! The host side builds that description ([`PrpPlan`]); the controller side walks it back into
//! contiguous segments ([`prp_segments`]), treating every pointer and list entry as untrusted.
//! A zero pointer where the transfer needs one is rejected: no buffer of ours lives at bus
//! address 0, so it is a pointer the host forgot to fill in.

use super::status::Status;

/// Smallest memory page size NVMe allows (CC.MPS = 0).
pub const MIN_PAGE_SIZE: u32 = 1 << 12;
/// Largest memory page size NVMe allows (CC.MPS = 15).
pub const MAX_PAGE_SIZE: u32 = 1 << 27;
/// Default cap on one transfer: 2 MiB, MDTS 9 with 4 KiB pages, what common SSDs report.
pub const DEFAULT_MAX_TRANSFER: u32 = 2 << 20;

/// Bytes per PRP entry.
const ENTRY_SIZE: u64 = 8;

/// An unusable memory page size or transfer cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrpConfigError {
    /// memory page size {0} is not a power of two in 4096..=134217728
    #[error("memory page size {0} is not a power of two in 4096..=134217728")]
    InvalidPageSize(u32),
    /// maximum transfer size is zero
    #[error("maximum transfer size is zero")]
    ZeroMaxTransfer,
}

/// The memory page size PRPs are built on (the controller's CC.MPS) and the largest transfer one
/// command may describe (its MDTS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrpConfig {
    page_size: u32,
    max_transfer: u32,
}

impl Default for PrpConfig {
    /// 4 KiB pages, 2 MiB transfers.
    fn default() -> Self {
        Self {
            page_size: MIN_PAGE_SIZE,
            max_transfer: DEFAULT_MAX_TRANSFER,
        }
    }
}

impl PrpConfig {
    /// Pages of `page_size` bytes (a power of two in 4 KiB..=128 MiB), transfers of at most
    /// `max_transfer` (> 0) bytes.
    pub fn new(page_size: u32, max_transfer: u32) -> Result<Self, PrpConfigError> {
        if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(PrpConfigError::InvalidPageSize(page_size));
        }
        if max_transfer == 0 {
            return Err(PrpConfigError::ZeroMaxTransfer);
        }
        Ok(Self {
            page_size,
            max_transfer,
        })
    }

    /// Memory page size in bytes.
    pub const fn page_size(&self) -> u32 {
        self.page_size
    }

    /// Largest transfer in bytes.
    pub const fn max_transfer(&self) -> u32 {
        self.max_transfer
    }

    /// PRP entries one full list page holds.
    pub const fn entries_per_page(&self) -> u64 {
        self.page_size as u64 / ENTRY_SIZE
    }

    const fn offset_mask(&self) -> u64 {
        self.page_size as u64 - 1
    }
}

/// A data pointer that does not describe a valid transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrpError {
    /// transfer length is zero
    #[error("transfer length is zero")]
    ZeroLength,
    /// transfer of {len} bytes exceeds the maximum of {max} bytes
    #[error("transfer of {len} bytes exceeds the maximum of {max} bytes")]
    TooLong {
        /// Bytes asked for.
        len: u64,
        /// Largest transfer allowed.
        max: u32,
    },
    /// a PRP pointer the transfer needs is zero
    #[error("a PRP pointer the transfer needs is zero")]
    ZeroPointer,
    /// PRP1 {0:#x} is not dword aligned
    #[error("PRP1 {0:#x} is not dword aligned")]
    Prp1Misaligned(u64),
    /// PRP entry {0:#x} has a nonzero offset in its memory page
    #[error("PRP entry {0:#x} has a nonzero offset in its memory page")]
    EntryMisaligned(u64),
    /// PRP list pointer {0:#x} is misaligned (PRP2: qword, chained lists: page)
    #[error("PRP list pointer {0:#x} is misaligned (PRP2: qword, chained lists: page)")]
    ListPointerMisaligned(u64),
    /// {len} bytes at {addr:#x} run past the end of the address space
    #[error("{len} bytes at {addr:#x} run past the end of the address space")]
    AddressOverflow {
        /// Start of the region.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// {needed} PRP list pages are needed but {given} were provided
    #[error("{needed} PRP list pages are needed but {given} were provided")]
    MissingListPages {
        /// List pages the transfer needs.
        needed: usize,
        /// List pages the caller provided.
        given: usize,
    },
}

impl PrpError {
    /// The status a controller completes the command with: Invalid Field in Command for every
    /// malformed data pointer. (The specification also has PRP Offset Invalid, 0x13, for the
    /// misalignments; we report one code so hosts need one check.)
    pub const fn status(&self) -> Status {
        Status::invalid_field()
    }
}

/// Why walking a data pointer failed: it was invalid, or reading a PRP list failed with `E`.
#[derive(Debug, thiserror::Error)]
pub enum PrpWalkError<E> {
    /// invalid data pointer: {0}
    #[error("invalid data pointer: {0}")]
    Invalid(#[from] PrpError),
    /// reading the PRP list at {addr:#x} failed
    #[error("reading the PRP list at {addr:#x} failed")]
    ListRead {
        /// Address of the entries being read.
        addr: u64,
        /// What the list reader reported.
        #[source]
        source: E,
    },
}

impl<E> PrpWalkError<E> {
    /// The status a controller completes the command with.
    pub const fn status(&self) -> Status {
        match self {
            Self::Invalid(error) => error.status(),
            Self::ListRead { .. } => Status::data_transfer_error(),
        }
    }
}

/// One PRP list to store at `addr` (page aligned) as little-endian `u64`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrpList {
    /// Bus address of the list page.
    pub addr: u64,
    /// Entries: data page addresses, the last one the next list's address when chained.
    pub entries: Vec<u64>,
}

/// How a command describes one virtually contiguous buffer: the two PRP fields and the PRP
/// lists the host must store before submitting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrpPlan {
    /// PRP1: the buffer's address.
    pub prp1: u64,
    /// PRP2: 0, the second page, or the first list's address.
    pub prp2: u64,
    /// Lists to store, in chain order; empty when the buffer spans at most two pages.
    pub lists: Vec<PrpList>,
}

/// Validates a buffer and returns how many memory pages it touches.
fn pages_spanned(iova: u64, len: u64, config: &PrpConfig) -> Result<u64, PrpError> {
    if len == 0 {
        return Err(PrpError::ZeroLength);
    }
    if len > u64::from(config.max_transfer) {
        return Err(PrpError::TooLong {
            len,
            max: config.max_transfer,
        });
    }
    if iova == 0 {
        return Err(PrpError::ZeroPointer);
    }
    if !iova.is_multiple_of(4) {
        return Err(PrpError::Prp1Misaligned(iova));
    }
    if iova.checked_add(len).is_none() {
        return Err(PrpError::AddressOverflow { addr: iova, len });
    }
    let span = (iova & config.offset_mask()) + len;
    Ok(span.div_ceil(u64::from(config.page_size)))
}

/// List pages needed for `pages` data pages: the first data page is PRP1; a list page carries
/// `per_page - 1` data entries plus the pointer to the next one, the last list up to `per_page`.
fn lists_for(pages: u64, per_page: u64) -> u64 {
    if pages <= 2 {
        0
    } else {
        (pages - 2).div_ceil(per_page - 1)
    }
}

impl PrpPlan {
    /// How many list pages [`PrpPlan::new`] needs for `len` bytes at `iova`.
    pub fn list_pages_needed(iova: u64, len: u64, config: &PrpConfig) -> Result<usize, PrpError> {
        let pages = pages_spanned(iova, len, config)?;
        // At most max_transfer / 4 KiB + 1 < 2^21 pages: fits any usize we run on.
        Ok(lists_for(pages, config.entries_per_page()) as usize)
    }

    /// Describes `len` bytes at bus address `iova` (nonzero, dword aligned). When the buffer
    /// spans more than two pages, the lists go into `list_pages` (nonzero, page-aligned bus
    /// addresses of pages the caller owns, at least
    /// [`list_pages_needed`](Self::list_pages_needed) of them; extra ones stay unused).
    pub fn new(
        iova: u64,
        len: u64,
        config: &PrpConfig,
        list_pages: &[u64],
    ) -> Result<Self, PrpError> {
        let pages = pages_spanned(iova, len, config)?;
        let page_size = u64::from(config.page_size);
        let first_page = iova & !config.offset_mask();
        let data_page = |index: u64| first_page + index * page_size;
        let per_page = config.entries_per_page();
        let needed = lists_for(pages, per_page) as usize;
        let list_pages = list_pages.get(..needed).ok_or(PrpError::MissingListPages {
            needed,
            given: list_pages.len(),
        })?;
        for &addr in list_pages {
            if addr == 0 {
                return Err(PrpError::ZeroPointer);
            }
            if addr & config.offset_mask() != 0 {
                return Err(PrpError::ListPointerMisaligned(addr));
            }
        }
        // One page: no PRP2 (`list_pages` is empty). Three or more: the first list.
        let prp2 = if pages == 2 {
            data_page(1)
        } else {
            list_pages.first().copied().unwrap_or(0)
        };
        let mut lists = Vec::with_capacity(needed);
        let mut next_data = 1;
        for (index, &addr) in list_pages.iter().enumerate() {
            let next_list = list_pages.get(index + 1);
            let data_entries = if next_list.is_some() {
                per_page - 1
            } else {
                pages - next_data
            };
            let mut entries: Vec<u64> = (next_data..next_data + data_entries)
                .map(data_page)
                .collect();
            entries.extend(next_list);
            next_data += data_entries;
            lists.push(PrpList { addr, entries });
        }
        Ok(Self {
            prp1: iova,
            prp2,
            lists,
        })
    }
}

/// Appends `len` bytes at `addr` to `(address, length)` segments, merging with the previous
/// segment when adjacent.
fn push_segment(segments: &mut Vec<(u64, u32)>, addr: u64, len: u32) -> Result<(), PrpError> {
    if addr == 0 {
        return Err(PrpError::ZeroPointer);
    }
    if addr.checked_add(u64::from(len)).is_none() {
        return Err(PrpError::AddressOverflow {
            addr,
            len: len.into(),
        });
    }
    match segments.last_mut() {
        // The merged length stays within the transfer length, below `u32::MAX`.
        Some((last_addr, last_len)) if *last_addr + u64::from(*last_len) == addr => {
            *last_len += len;
        }
        _ => segments.push((addr, len)),
    }
    Ok(())
}

/// Controller side: walks the data pointer of a `len`-byte transfer into physically contiguous
/// `(bus address, length)` segments in transfer order, adjacent pages merged.
///
/// `read_list(addr, entries)` must fill `entries` with the little-endian `u64`s stored at bus
/// address `addr`; the walker never asks for entries past the end of `addr`'s memory page. Every
/// pointer is checked before use: nonzero, PRP1 dword aligned, data entries page aligned, PRP2
/// as a list pointer qword aligned, chained list pointers page aligned, no region past the end of
/// the address space.
pub fn prp_segments<E>(
    prp1: u64,
    prp2: u64,
    len: u64,
    config: &PrpConfig,
    mut read_list: impl FnMut(u64, &mut [u64]) -> Result<(), E>,
) -> Result<Vec<(u64, u32)>, PrpWalkError<E>> {
    if len == 0 {
        return Err(PrpError::ZeroLength.into());
    }
    if len > u64::from(config.max_transfer) {
        return Err(PrpError::TooLong {
            len,
            max: config.max_transfer,
        }
        .into());
    }
    if !prp1.is_multiple_of(4) {
        return Err(PrpError::Prp1Misaligned(prp1).into());
    }
    let page_size = u64::from(config.page_size);
    let mask = config.offset_mask();
    // Each step moves at most one page (at most 128 MiB), so lengths below fit in u32.
    let chunk = |remaining: u64| remaining.min(page_size) as u32;
    let mut segments = Vec::new();
    let first = len.min(page_size - (prp1 & mask));
    push_segment(&mut segments, prp1, first as u32)?;
    let mut remaining = len - first;
    if remaining == 0 {
        return Ok(segments);
    }
    if remaining <= page_size {
        if prp2 & mask != 0 {
            return Err(PrpError::EntryMisaligned(prp2).into());
        }
        push_segment(&mut segments, prp2, chunk(remaining))?;
        return Ok(segments);
    }
    if prp2 == 0 {
        return Err(PrpError::ZeroPointer.into());
    }
    if !prp2.is_multiple_of(ENTRY_SIZE) {
        return Err(PrpError::ListPointerMisaligned(prp2).into());
    }
    let mut list_addr = prp2;
    let mut entries = Vec::new();
    loop {
        let pages_left = remaining.div_ceil(page_size);
        let room = (page_size - (list_addr & mask)) / ENTRY_SIZE;
        let chained = pages_left > room;
        // Bounded by the entries of one page and by the pages of one transfer.
        entries.resize(pages_left.min(room) as usize, 0);
        read_list(list_addr, &mut entries).map_err(|source| PrpWalkError::ListRead {
            addr: list_addr,
            source,
        })?;
        let (data, next) = match (chained, entries.split_last()) {
            (true, Some((&next, data))) => (data, Some(next)),
            _ => (&entries[..], None),
        };
        for &entry in data {
            if entry & mask != 0 {
                return Err(PrpError::EntryMisaligned(entry).into());
            }
            let piece = chunk(remaining);
            push_segment(&mut segments, entry, piece)?;
            remaining -= u64::from(piece);
        }
        match next {
            None => return Ok(segments),
            Some(0) => return Err(PrpError::ZeroPointer.into()),
            // After a chain every list starts a page, so each later list page moves at least
            // `entries_per_page - 1` pages of data: the walk ends even on a looping list.
            Some(next) if next & mask == 0 => list_addr = next,
            Some(next) => return Err(PrpError::ListPointerMisaligned(next).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    const PAGE: u64 = 4096;

    type Walk = Result<Vec<(u64, u32)>, PrpWalkError<Unmapped>>;

    /// Bus memory holding PRP list pages, keyed by page address.
    struct FakeMemory {
        page_size: u64,
        pages: HashMap<u64, Vec<u64>>,
    }

    #[derive(Debug, PartialEq, Eq, thiserror::Error)]
    #[error("nothing mapped at {0:#x}")]
    struct Unmapped(u64);

    impl FakeMemory {
        fn new(config: &PrpConfig) -> Self {
            Self {
                page_size: u64::from(config.page_size()),
                pages: HashMap::new(),
            }
        }

        fn store(&mut self, addr: u64, entries: &[u64]) {
            let page = addr & !(self.page_size - 1);
            let words = (self.page_size / 8) as usize;
            let stored = self.pages.entry(page).or_insert_with(|| vec![0; words]);
            let first = ((addr - page) / 8) as usize;
            stored[first..first + entries.len()].copy_from_slice(entries);
        }

        /// Fails (instead of wrapping) when asked for entries past the end of the page.
        fn read(&self, addr: u64, out: &mut [u64]) -> Result<(), Unmapped> {
            let page = addr & !(self.page_size - 1);
            let first = ((addr - page) / 8) as usize;
            let words = self.pages.get(&page).ok_or(Unmapped(addr))?;
            out.copy_from_slice(words.get(first..first + out.len()).ok_or(Unmapped(addr))?);
            Ok(())
        }
    }

    /// Stores the plan's lists in a fresh memory and walks the plan back.
    fn walk(plan: &PrpPlan, len: u64, config: &PrpConfig) -> Walk {
        let mut memory = FakeMemory::new(config);
        for list in &plan.lists {
            memory.store(list.addr, &list.entries);
        }
        prp_segments(plan.prp1, plan.prp2, len, config, |addr, out| {
            memory.read(addr, out)
        })
    }

    fn no_lists(_: u64, _: &mut [u64]) -> Result<(), Unmapped> {
        panic!("no list expected")
    }

    fn invalid(walk: Walk) -> PrpError {
        match walk {
            Err(PrpWalkError::Invalid(error)) => error,
            other => panic!("expected an invalid data pointer, got {other:?}"),
        }
    }

    #[test]
    fn config_accepts_only_power_of_two_page_sizes_from_4k() {
        assert!(PrpConfig::new(4096, 1).is_ok());
        assert!(PrpConfig::new(1 << 27, 1).is_ok());
        for bad in [0, 512, 2048, 4097, 12288, 1 << 28] {
            assert_eq!(
                PrpConfig::new(bad, 1),
                Err(PrpConfigError::InvalidPageSize(bad))
            );
        }
        assert_eq!(
            PrpConfig::new(4096, 0),
            Err(PrpConfigError::ZeroMaxTransfer)
        );
        assert_eq!(PrpConfig::default().page_size(), 4096);
        assert_eq!(PrpConfig::default().max_transfer(), 2 << 20);
    }

    #[test]
    fn buffer_within_one_page_uses_prp1_only() {
        let config = PrpConfig::default();
        let plan = PrpPlan::new(0x1_0100, 0xF00, &config, &[]).unwrap();
        assert_eq!(
            plan,
            PrpPlan {
                prp1: 0x1_0100,
                prp2: 0,
                lists: vec![]
            }
        );
        // The controller ignores PRP2 when PRP1's page holds the whole transfer.
        let segments = prp_segments(0x1_0100, 0xDEAD_BEEF, 0xF00, &config, no_lists).unwrap();
        assert_eq!(segments, vec![(0x1_0100, 0xF00)]);
    }

    #[test]
    fn buffer_over_two_pages_puts_the_second_page_in_prp2() {
        let config = PrpConfig::default();
        let plan = PrpPlan::new(0x1_0200, 4096, &config, &[]).unwrap();
        assert_eq!(
            (plan.prp1, plan.prp2, plan.lists.len()),
            (0x1_0200, 0x1_1000, 0)
        );
        let segments = prp_segments(0x1_0200, 0x9_0000, 4096, &config, no_lists).unwrap();
        assert_eq!(segments, vec![(0x1_0200, 0xE00), (0x9_0000, 0x200)]);
    }

    #[test]
    fn three_pages_need_one_list() {
        let config = PrpConfig::default();
        assert_eq!(
            PrpPlan::list_pages_needed(0x1_0000, 3 * PAGE, &config),
            Ok(1)
        );
        let plan = PrpPlan::new(0x1_0000, 3 * PAGE, &config, &[0x80_0000]).unwrap();
        assert_eq!(plan.prp2, 0x80_0000);
        let list = PrpList {
            addr: 0x80_0000,
            entries: vec![0x1_1000, 0x1_2000],
        };
        assert_eq!(plan.lists, vec![list]);
        assert_eq!(
            walk(&plan, 3 * PAGE, &config).unwrap(),
            vec![(0x1_0000, 3 * 4096)]
        );
    }

    #[test]
    fn lists_chain_through_their_last_entry() {
        let config = PrpConfig::new(4096, 8 << 20).unwrap();
        // 514 pages: PRP1 + 511 entries in list 0 + 2 entries in list 1.
        let base = 1 << 30;
        let len = 514 * PAGE;
        assert_eq!(PrpPlan::list_pages_needed(base, len, &config), Ok(2));
        let pages = [0xA000_0000, 0xB000_0000, 0xC000_0000];
        let plan = PrpPlan::new(base, len, &config, &pages).unwrap();
        assert_eq!(plan.lists.len(), 2);
        assert_eq!(plan.lists[0].entries.len(), 512);
        assert_eq!(plan.lists[0].entries[511], 0xB000_0000, "chain pointer");
        assert_eq!(plan.lists[0].entries[510], base + 511 * PAGE);
        assert_eq!(
            plan.lists[1].entries,
            vec![base + 512 * PAGE, base + 513 * PAGE]
        );
        assert_eq!(walk(&plan, len, &config).unwrap(), vec![(base, len as u32)]);
        // 513 pages fit one list exactly: 512 data entries, no chain.
        assert_eq!(PrpPlan::list_pages_needed(base, 513 * PAGE, &config), Ok(1));
    }

    #[test]
    fn plan_rejects_missing_zero_or_misaligned_list_pages() {
        let config = PrpConfig::default();
        let plan = |lists: &[u64]| PrpPlan::new(0x1000, 3 * PAGE, &config, lists);
        assert_eq!(
            plan(&[]),
            Err(PrpError::MissingListPages {
                needed: 1,
                given: 0
            })
        );
        assert_eq!(
            plan(&[0x8008]),
            Err(PrpError::ListPointerMisaligned(0x8008))
        );
        assert_eq!(plan(&[0]), Err(PrpError::ZeroPointer));
    }

    #[test]
    fn plan_rejects_bad_buffers() {
        let config = PrpConfig::default();
        assert_eq!(
            PrpPlan::new(0x1000, 0, &config, &[]),
            Err(PrpError::ZeroLength)
        );
        let too_long = (2 << 20) + 1;
        assert_eq!(
            PrpPlan::new(0x1000, too_long, &config, &[]),
            Err(PrpError::TooLong {
                len: too_long,
                max: 2 << 20
            })
        );
        assert_eq!(PrpPlan::new(0, 8, &config, &[]), Err(PrpError::ZeroPointer));
        assert_eq!(
            PrpPlan::new(2, 8, &config, &[]),
            Err(PrpError::Prp1Misaligned(2))
        );
        assert_eq!(
            PrpPlan::new(u64::MAX - 3, 4, &config, &[]),
            Err(PrpError::AddressOverflow {
                addr: u64::MAX - 3,
                len: 4
            })
        );
    }

    #[test]
    fn walker_rejects_misaligned_pointers() {
        let config = PrpConfig::default();
        let walk = |prp1, prp2, len| prp_segments(prp1, prp2, len, &config, no_lists);
        assert_eq!(
            invalid(walk(0x1002, 0, 16)),
            PrpError::Prp1Misaligned(0x1002)
        );
        assert_eq!(
            invalid(walk(0x1000, 0x2008, 8192)),
            PrpError::EntryMisaligned(0x2008)
        );
        assert_eq!(
            invalid(walk(0x1000, 0x2004, 3 * PAGE)),
            PrpError::ListPointerMisaligned(0x2004)
        );
        let misaligned_entry = |_: u64, out: &mut [u64]| -> Result<(), Unmapped> {
            out.copy_from_slice(&[0x5000, 0x6010][..out.len()]);
            Ok(())
        };
        assert_eq!(
            invalid(prp_segments(
                0x1000,
                0x2000,
                3 * PAGE,
                &config,
                misaligned_entry
            )),
            PrpError::EntryMisaligned(0x6010)
        );
        // A chain pointer (last entry of a full list page) must be page aligned.
        let bad_chain = |_: u64, out: &mut [u64]| -> Result<(), Unmapped> {
            out.fill(0x7000);
            out[out.len() - 1] = 0x9008;
            Ok(())
        };
        let big = PrpConfig::new(4096, 4 << 20).unwrap();
        assert_eq!(
            invalid(prp_segments(0x1000, 0x3000, 600 * PAGE, &big, bad_chain)),
            PrpError::ListPointerMisaligned(0x9008)
        );
    }

    #[test]
    fn walker_rejects_zero_pointers_the_transfer_needs() {
        let config = PrpConfig::default();
        let walk = |prp1, prp2, len| prp_segments(prp1, prp2, len, &config, no_lists);
        assert_eq!(invalid(walk(0, 0, 16)), PrpError::ZeroPointer);
        assert_eq!(
            invalid(walk(0x1000, 0, 2 * PAGE)),
            PrpError::ZeroPointer,
            "missing PRP2"
        );
        assert_eq!(
            invalid(walk(0x1000, 0, 3 * PAGE)),
            PrpError::ZeroPointer,
            "missing list"
        );
        let zero_entry = |_: u64, out: &mut [u64]| -> Result<(), Unmapped> {
            out.fill(0);
            Ok(())
        };
        let list_walk = prp_segments(0x1000, 0x8000, 3 * PAGE, &config, zero_entry);
        assert_eq!(invalid(list_walk), PrpError::ZeroPointer);
        let zero_chain = |_: u64, out: &mut [u64]| -> Result<(), Unmapped> {
            out.fill(0x7000);
            out[out.len() - 1] = 0;
            Ok(())
        };
        let big = PrpConfig::new(4096, 4 << 20).unwrap();
        let chain_walk = prp_segments(0x1000, 0x3000, 600 * PAGE, &big, zero_chain);
        assert_eq!(invalid(chain_walk), PrpError::ZeroPointer);
    }

    #[test]
    fn walker_rejects_bad_lengths_and_wrapping_regions() {
        let config = PrpConfig::default();
        let walk = |prp1, prp2, len| prp_segments(prp1, prp2, len, &config, no_lists);
        assert_eq!(invalid(walk(0x1000, 0, 0)), PrpError::ZeroLength);
        let too_long = (2 << 20) + 4;
        assert_eq!(
            invalid(walk(0x1000, 0, too_long)),
            PrpError::TooLong {
                len: too_long,
                max: 2 << 20
            }
        );
        let top = u64::MAX - 4095;
        let overflow = PrpError::AddressOverflow {
            addr: top,
            len: 4096,
        };
        assert_eq!(invalid(walk(top, 0, 4096)), overflow);
        assert_eq!(invalid(walk(0x1000, top, 8192)), overflow);
    }

    #[test]
    fn list_read_failure_is_reported_with_its_address() {
        let config = PrpConfig::default();
        let result = prp_segments(0x1000, 0x4000, 3 * PAGE, &config, |addr, _| {
            Err(Unmapped(addr))
        });
        match result {
            Err(PrpWalkError::ListRead { addr, source }) => {
                assert_eq!((addr, source), (0x4000, Unmapped(0x4000)));
            }
            other => panic!("expected a list read error, got {other:?}"),
        }
    }

    #[test]
    fn prp2_list_with_an_offset_continues_on_a_new_page() {
        // PRP2 points at the last two entries of its page: one data entry, then the chain.
        let config = PrpConfig::default();
        let mut memory = FakeMemory::new(&config);
        memory.store(0x8FF0, &[0x2_0000, 0xA000]);
        memory.store(0xA000, &[0x2_1000, 0x2_2000]);
        let read = |addr, out: &mut [u64]| memory.read(addr, out);
        let segments = prp_segments(0x1_0000, 0x8FF0, 4 * PAGE, &config, read).unwrap();
        assert_eq!(segments, vec![(0x1_0000, 4096), (0x2_0000, 3 * 4096)]);
    }

    #[test]
    fn non_adjacent_pages_stay_separate_segments() {
        let config = PrpConfig::default();
        let mut memory = FakeMemory::new(&config);
        memory.store(0x8000, &[0x3000, 0x2000]);
        let read = |addr, out: &mut [u64]| memory.read(addr, out);
        let segments = prp_segments(0x1000, 0x8000, 3 * PAGE - 8, &config, read).unwrap();
        assert_eq!(
            segments,
            vec![(0x1000, 4096), (0x3000, 4096), (0x2000, 4088)]
        );
    }

    #[test]
    fn errors_map_to_invalid_field_and_list_reads_to_data_transfer_error() {
        let invalid_pointers = [
            PrpError::ZeroLength,
            PrpError::ZeroPointer,
            PrpError::TooLong { len: 1, max: 0 },
            PrpError::Prp1Misaligned(1),
            PrpError::EntryMisaligned(1),
            PrpError::ListPointerMisaligned(1),
            PrpError::AddressOverflow { addr: 1, len: 1 },
        ];
        for error in invalid_pointers {
            assert_eq!(error.status(), Status::invalid_field(), "{error}");
            assert_eq!(
                PrpWalkError::<Unmapped>::from(error).status(),
                Status::invalid_field()
            );
        }
        let read: PrpWalkError<Unmapped> = PrpWalkError::ListRead {
            addr: 0,
            source: Unmapped(0),
        };
        assert_eq!(read.status(), Status::data_transfer_error());
    }

    fn config_strategy() -> impl Strategy<Value = PrpConfig> {
        // 8 MiB transfers make 4 KiB pages chain up to five list pages.
        (12u32..=16).prop_map(|shift| PrpConfig::new(1 << shift, 8 << 20).unwrap())
    }

    proptest! {
        #[test]
        fn plan_then_walk_returns_exactly_the_buffer(
            config in config_strategy(),
            len_seed: u64,
            iova_seed: u64,
            near_top: bool,
        ) {
            let len = len_seed % u64::from(config.max_transfer()) + 1;
            let iova = if near_top {
                (u64::MAX - len - iova_seed % (1 << 20)) & !3
            } else {
                (iova_seed % (1 << 52) + 4) & !3
            };
            let needed = PrpPlan::list_pages_needed(iova, len, &config).unwrap();
            let page = u64::from(config.page_size());
            let list_pages: Vec<u64> = (0..needed as u64).map(|i| (1 << 56) + i * page).collect();
            let plan = PrpPlan::new(iova, len, &config, &list_pages).unwrap();
            prop_assert_eq!(plan.lists.len(), needed);
            let per_page = config.entries_per_page();
            prop_assert!(plan.lists.iter().all(|l| l.entries.len() as u64 <= per_page));
            prop_assert_eq!(walk(&plan, len, &config).unwrap(), vec![(iova, len as u32)]);
        }

        #[test]
        fn walking_arbitrary_pointers_never_panics_and_covers_the_length(
            config in config_strategy(),
            prp1: u64,
            prp2: u64,
            len in 0u64..(9 << 20),
            aligned_entries: bool,
            seed: u64,
        ) {
            let mask = u64::from(config.page_size()) - 1;
            let prp1 = if seed & 1 == 0 { prp1 & !3 } else { prp1 };
            let prp2 = if seed & 2 == 0 { prp2 & !7 } else { prp2 };
            let reader = |addr: u64, out: &mut [u64]| -> Result<(), Unmapped> {
                if addr % 97 == seed % 97 {
                    return Err(Unmapped(addr));
                }
                for (i, word) in out.iter_mut().enumerate() {
                    let noise =
                        (addr ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(i as u32);
                    *word = if aligned_entries { noise & !mask } else { noise };
                }
                Ok(())
            };
            match prp_segments(prp1, prp2, len, &config, reader) {
                Ok(segments) => {
                    let total: u64 = segments.iter().map(|&(_, len)| u64::from(len)).sum();
                    prop_assert_eq!(total, len);
                    prop_assert_eq!(segments[0].0, prp1);
                    prop_assert!(segments.iter().all(|&(addr, len)| addr != 0 && len > 0));
                    let not_adjacent =
                        |w: &[(u64, u32)]| w[0].0 + u64::from(w[0].1) != w[1].0;
                    prop_assert!(segments.windows(2).all(not_adjacent));
                }
                Err(error) => prop_assert!(!error.status().is_success()),
            }
        }
    }
}
