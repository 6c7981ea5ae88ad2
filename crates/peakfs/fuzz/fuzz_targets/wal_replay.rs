//! Fuzzes the WAL parser (`peakfs::pstore::wal`), which recovery runs over whatever a crash
//! left on disk: nothing may panic; a record body that decodes re-encodes to the same bytes;
//! and a log written by [`Wal`] replays exactly its frames, or a prefix of them after a
//! fuzz-chosen byte is corrupted or the region is cut short (a torn write).
#![no_main]

use libfuzzer_sys::fuzz_target;
use peakfs::pstore::wal::{Record, Wal};

const FS_ID: u64 = 0x5045_414b;
const PAGE: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((ctl, body)) = data.split_first_chunk::<8>() else {
        return;
    };
    let first_seq = u64::from(ctl[0]);

    // Raw bytes as a log region: rarely a valid frame (checksums), but every header path runs.
    let raw = Wal::replay(FS_ID, body, first_seq);
    assert!(raw.end as usize <= body.len());
    assert_eq!(raw.next_seq - first_seq, raw.frames.len() as u64);
    // After a reboot: a prefix of those frames, the numbers of all of them used.
    let mut flushed = Wal::replay(FS_ID, body, first_seq);
    flushed.keep_flushed();
    assert!(flushed.end <= raw.end && flushed.next_seq == raw.next_seq);
    assert_eq!(flushed.frames[..], raw.frames[..flushed.frames.len()]);

    // Raw bytes as one frame's records.
    if let Ok(records) = Record::decode_all(body) {
        let mut again = Vec::new();
        for r in &records {
            r.encode(&mut again);
        }
        assert_eq!(again, body, "re-encoded records differ");
    }

    // A log built from the pieces of `body` (split at 0xFF bytes) that decode, written out
    // page by page as PStore does, replays to the same frames.
    let frames: Vec<Vec<Record>> = body
        .split(|&b| b == 0xFF)
        .filter_map(|piece| Record::decode_all(piece).ok())
        .collect();
    let capacity = 64 * 1024;
    let mut wal = Wal::new(FS_ID, PAGE, capacity, first_seq);
    let mut region = vec![0u8; capacity as usize];
    let mut logged = Vec::new();
    for f in frames {
        if !wal.fits(
            f.iter()
                .map(|r| {
                    let mut v = Vec::new();
                    r.encode(&mut v);
                    v.len()
                })
                .sum(),
        ) {
            break;
        }
        wal.append(&f).expect("a frame that fits appends");
        logged.push(f);
        // Commit after some frames: the page holding the log end is rewritten next time.
        if ctl[1] & (1 << (logged.len() % 8)) != 0 {
            write(&mut wal, &mut region);
        }
    }
    write(&mut wal, &mut region);
    let replay = Wal::replay(FS_ID, &region, first_seq);
    assert_eq!(replay.frames, logged);
    assert_eq!(replay.end, wal.len());
    assert_eq!(replay.next_seq, wal.next_seq());

    // Corrupt one byte (or none) and tear the region: the replay is a prefix of the log.
    let at = usize::from(u16::from_le_bytes([ctl[2], ctl[3]]));
    if at < region.len() && ctl[4] != 0 {
        region[at] ^= ctl[4];
    }
    let cut = usize::from(u16::from_le_bytes([ctl[5], ctl[6]])).min(region.len());
    let torn = Wal::replay(FS_ID, &region[..cut], first_seq);
    assert!(torn.frames.len() <= logged.len());
    assert_eq!(torn.frames[..], logged[..torn.frames.len()]);
    assert!(torn.end <= wal.len());
});

fn write(wal: &mut Wal, region: &mut [u8]) {
    wal.write_out(|page, bytes| {
        let at = page as usize * PAGE;
        region[at..at + bytes.len()].copy_from_slice(bytes);
        Ok::<(), ()>(())
    })
    .expect("writing to memory cannot fail");
}
