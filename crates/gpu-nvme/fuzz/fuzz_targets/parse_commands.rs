//! Fuzzes what a software controller parses from untrusted memory (`gpu_nvme::spec`): a
//! submission entry, the PRP walk of its data pointer through fuzzed PRP lists, a DSM range, a
//! completion entry and the Identify pages. Nothing may panic, and what parses must re-encode
//! to itself.
#![no_main]

use gpu_nvme::spec::{
    CompletionEntry, DsmRange, IdentifyController, IdentifyNamespace, PrpConfig, SubmissionEntry,
    parse_active_namespace_list, prp_segments,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(bytes) = data.first_chunk::<{ SubmissionEntry::SIZE }>() {
        let sqe = SubmissionEntry::from_bytes(bytes);
        assert_eq!(&sqe.to_bytes(), bytes);
        let _ = (sqe.io_opcode(), sqe.admin_opcode(), sqe.queue_priority());
        assert_eq!(sqe.block_count(), u32::from(sqe.nlb()) + 1);

        // The page size comes from CDW13, the length from CDW14; PRP list entries are read
        // from the rest of the input, wrapping around, as a hostile host could lay them out.
        let lists = &data[SubmissionEntry::SIZE..];
        let page_size = 4096 << (sqe.cdw13 % 5);
        let config = PrpConfig::new(page_size, 8 << 20).expect("valid page size");
        let len = u64::from(sqe.cdw14 % (9 << 20));
        let read_list = |addr: u64, out: &mut [u64]| -> Result<(), ()> {
            if lists.len() < 8 {
                return Err(());
            }
            let words = lists.len() / 8;
            for (i, entry) in out.iter_mut().enumerate() {
                let word = (addr / 8).wrapping_add(i as u64) % words as u64;
                let at = word as usize * 8;
                let mut raw = [0; 8];
                raw.copy_from_slice(&lists[at..at + 8]);
                *entry = u64::from_le_bytes(raw);
            }
            Ok(())
        };
        match prp_segments(sqe.prp1, sqe.prp2, len, &config, read_list) {
            Ok(segments) => {
                let total: u64 = segments.iter().map(|&(_, piece)| u64::from(piece)).sum();
                assert_eq!(total, len);
                assert_eq!(segments.first().map(|&(addr, _)| addr), Some(sqe.prp1));
            }
            Err(error) => assert!(!error.status().is_success()),
        }
    }

    if let Some(bytes) = data.first_chunk::<{ DsmRange::SIZE }>() {
        assert_eq!(&DsmRange::from_bytes(bytes).to_bytes(), bytes);
    }
    if let Some(bytes) = data.first_chunk::<{ CompletionEntry::SIZE }>() {
        let cqe = CompletionEntry::from_bytes(bytes);
        assert_eq!(&cqe.to_bytes(), bytes);
        let rebuilt = CompletionEntry::new(
            cqe.cid,
            cqe.sq_id,
            cqe.sq_head,
            cqe.status(),
            cqe.phase(),
            cqe.dw0,
        );
        assert_eq!(rebuilt.status, cqe.status);
    }

    if let Ok(controller) = IdentifyController::parse(data) {
        assert_eq!(
            IdentifyController::parse(&controller.to_page()),
            Ok(controller)
        );
    }
    if let Ok(namespace) = IdentifyNamespace::parse(data) {
        assert_eq!(
            IdentifyNamespace::parse(&namespace.to_page()),
            Ok(namespace)
        );
        let _ = namespace.geometry();
    }
    let _ = parse_active_namespace_list(data);
});
