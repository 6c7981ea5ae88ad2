//! The client library against a real cluster (master + 2 servers as child processes):
//! namespace operations, the write pipeline, commit consistency between clients, and
//! timeouts against a dead server.

mod client_support;

use std::time::{Duration, Instant};

use client_support::Cluster;
use peakfs::client::ClientError;
use peakfs::placement::{DataDist, Hint};
use peakfs::protocol::{Errno, SetAttr};

fn errno(r: Result<impl std::fmt::Debug, ClientError>) -> i32 {
    r.expect_err("expected an error").errno()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize * 31 + i * 7 + i / 251) as u8)
        .collect()
}

#[test]
fn namespace_operations_behave_like_posix() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    for (dir, hint) in [
        ("/reg", Hint::default()),
        (
            "/big",
            Hint {
                bigdir: true,
                ..Hint::default()
            },
        ),
    ] {
        c.mkdir(dir, 0o755, Some(hint)).unwrap();
        assert!(c.stat(dir).unwrap().is_dir());
        assert_eq!(errno(c.mkdir(dir, 0o755, None)), libc::EEXIST);
        c.mkdir(&format!("{dir}/sub"), 0o700, None).unwrap();
        let fd = c.create(&format!("{dir}/f"), 0o644).unwrap();
        c.close(fd).unwrap();
        let mut names: Vec<_> = c
            .readdir(dir)
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.mode & libc::S_IFMT))
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                (b"f".to_vec(), libc::S_IFREG),
                (b"sub".to_vec(), libc::S_IFDIR)
            ]
        );
        assert_eq!(errno(c.rmdir(dir)), libc::ENOTEMPTY);
        assert_eq!(errno(c.rmdir(&format!("{dir}/f"))), libc::ENOTDIR);
        c.rename(&format!("{dir}/f"), &format!("{dir}/sub/g"))
            .unwrap();
        assert_eq!(errno(c.stat(&format!("{dir}/f"))), libc::ENOENT);
        assert!(!c.stat(&format!("{dir}/sub/g")).unwrap().is_dir());
        c.unlink(&format!("{dir}/sub/g")).unwrap();
        assert_eq!(errno(c.unlink(&format!("{dir}/sub/g"))), libc::ENOENT);
        c.rmdir(&format!("{dir}/sub")).unwrap();
        c.rmdir(dir).unwrap();
        assert_eq!(errno(c.stat(dir)), libc::ENOENT);
    }
    // Renaming a directory across slices keeps its contents reachable.
    c.mkdir("/a", 0o755, None).unwrap();
    c.mkdir("/a/b", 0o755, None).unwrap();
    let fd = c.create("/a/b/x", 0o644).unwrap();
    c.write(fd, b"hello").unwrap();
    c.close(fd).unwrap();
    c.rename("/a/b", "/moved").unwrap();
    assert_eq!(c.stat("/moved/x").unwrap().size, 5);
    assert_eq!(errno(c.stat("/a/b")), libc::ENOENT);
    assert!(c.statfs().unwrap().inodes_used > 0);
    // A directory resolved just before (the next path in it skips the walk) is forgotten when
    // it moves or goes: paths through its old name fail, its new name works.
    c.mkdir("/a/d", 0o755, None).unwrap();
    let fd = c.create("/a/d/f0", 0o644).unwrap();
    c.close(fd).unwrap();
    assert!(!c.stat("/a/d/f0").unwrap().is_dir());
    c.rename("/a/d", "/a/e").unwrap();
    assert_eq!(errno(c.stat("/a/d/f0")), libc::ENOENT);
    assert_eq!(errno(c.create("/a/d/f1", 0o644)), libc::ENOENT);
    assert!(!c.stat("/a/e/f0").unwrap().is_dir());
    c.unlink("/a/e/f0").unwrap();
    c.rmdir("/a/e").unwrap();
    assert_eq!(errno(c.create("/a/e/f2", 0o644)), libc::ENOENT);
    // Moved or removed through inos (no path resolved in between), likewise.
    let d = c.mkdir("/a/g", 0o755, None).unwrap();
    c.mkdir("/a/g/sub", 0o755, None).unwrap();
    let fd = c.create("/a/g/sub/x", 0o644).unwrap();
    c.close(fd).unwrap();
    assert!(!c.stat("/a/g/sub/x").unwrap().is_dir());
    c.rename_at(d.ino, b"sub", d.ino, b"moved").unwrap();
    assert_eq!(errno(c.stat("/a/g/sub/x")), libc::ENOENT);
    assert!(!c.stat("/a/g/moved/x").unwrap().is_dir());
    c.unlink("/a/g/moved/x").unwrap();
    c.rmdir_at(d.ino, b"moved").unwrap();
    assert_eq!(errno(c.stat("/a/g/moved/x")), libc::ENOENT);
    // A file is no directory to resolve through, fast path or not.
    let fd = c.create("/a/file", 0o644).unwrap();
    c.close(fd).unwrap();
    assert_eq!(errno(c.stat("/a/file/x")), libc::ENOTDIR);
    assert_eq!(errno(c.stat("/a/file/x")), libc::ENOTDIR);
}

#[test]
fn data_round_trips_under_every_distribution_and_truncate_drops_it() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    for (i, dist) in [DataDist::Block, DataDist::File, DataDist::Io]
        .into_iter()
        .enumerate()
    {
        let dir = format!("/d{i}");
        c.mkdir(&dir, 0o755, Some(dir_of(dist))).unwrap();
        let path = format!("{dir}/f");
        let fd = c.create(&path, 0o644).unwrap();
        // 600 KiB in 100 KiB writes: many pipelined writes, several blocks each.
        let chunk = 100 << 10;
        for k in 0..6u64 {
            c.pwrite(fd, &pattern(k, chunk), k * chunk as u64).unwrap();
        }
        c.fsync(fd).unwrap();
        assert_eq!(c.unfinished(fd), 0);
        c.close(fd).unwrap();
        assert_eq!(c.stat(&path).unwrap().size, 6 * chunk as u64);
        let fd = c.open(&path, libc::O_RDONLY, 0).unwrap();
        for k in 0..6u64 {
            let got = c.pread(fd, chunk, k * chunk as u64).unwrap();
            assert!(got == pattern(k, chunk), "{dist:?} chunk {k} differs");
        }
        c.close(fd).unwrap();
        // A cut through the first write and a regrow: the bytes past the cut read as zeros.
        c.truncate(&path, 1000).unwrap();
        c.truncate(&path, 300_000).unwrap();
        let fd = c.open(&path, libc::O_RDONLY, 0).unwrap();
        let got = c.pread(fd, 300_000, 0).unwrap();
        assert_eq!(&got[..1000], &pattern(0, chunk)[..1000]);
        assert!(
            got[1000..].iter().all(|b| *b == 0),
            "{dist:?}: truncated bytes came back"
        );
        c.close(fd).unwrap();
        c.unlink(&path).unwrap();
    }
}

/// I/O-based distribution: the first write fixes the file's I/O unit (its length, at least a
/// page), and every byte lives in the unit that holds its offset. Reads of any offset and
/// length, by any client, see the last write of each byte, also where writes overlap and
/// straddle units.
#[test]
fn an_io_based_file_reads_back_at_any_offset_and_overlapping_writes_win() {
    const XFER: usize = 47_008;
    let cl = Cluster::start(2);
    let mut w = cl.client();
    let io = dir_of(DataDist::Io);
    w.mkdir("/n1", 0o755, Some(io)).unwrap();
    let fd = w.create("/n1/shared", 0o644).unwrap();
    assert_eq!(w.stat("/n1/shared").unwrap().io_unit, 0, "no write yet");
    let mut model = vec![0u8; 8 * XFER];
    let mut put = |w: &mut peakfs::client::Client, seed: u64, at: usize, len: usize| {
        let data = pattern(seed, len);
        w.pwrite(fd, &data, at as u64).unwrap();
        if model.len() < at + len {
            model.resize(at + len, 0);
        }
        model[at..at + len].copy_from_slice(&data);
    };
    // N-1 transfers, the last first; then writes over them: one inside a unit, one across
    // three units, and one past the end.
    for k in (0..8).rev() {
        put(&mut w, k as u64, k * XFER, XFER);
    }
    put(&mut w, 100, 5_000, 10);
    put(&mut w, 101, XFER - 7, 2 * XFER + 100);
    put(&mut w, 102, 8 * XFER + 3_000, 9_000);
    w.close(fd).unwrap();
    let a = w.stat("/n1/shared").unwrap();
    assert_eq!((a.io_unit, a.size), (XFER as u32, model.len() as u64));
    // Another client reads in 128 KiB pieces (as a FUSE reader does), then at odd places.
    let mut r = cl.client();
    let fd = r.open("/n1/shared", libc::O_RDONLY, 0).unwrap();
    let mut whole = Vec::new();
    while whole.len() < model.len() {
        let got = r.pread(fd, 128 << 10, whole.len() as u64).unwrap();
        assert!(!got.is_empty(), "short at {}", whole.len());
        whole.extend_from_slice(&got);
    }
    assert!(whole == model, "read in 128 KiB pieces");
    for (at, len) in [
        (0, 1),
        (4_999, 12),
        (XFER - 8, 2),
        (3 * XFER - 1, XFER + 2),
        (8 * XFER, 12_000),
    ] {
        let got = r.pread(fd, len, at as u64).unwrap();
        let want = &model[at..(at + len).min(model.len())];
        assert!(got == want, "{len} bytes at {at}");
    }
    r.close(fd).unwrap();
    // A second writer's first write does not change the unit; a tiny first write of a new
    // file fixes a page.
    let fd = r.open("/n1/shared", libc::O_WRONLY, 0).unwrap();
    r.pwrite(fd, b"xyz", 1).unwrap();
    r.close(fd).unwrap();
    assert_eq!(r.stat("/n1/shared").unwrap().io_unit, XFER as u32);
    let fd = r.create("/n1/small", 0o644).unwrap();
    r.pwrite(fd, b"header", 0).unwrap();
    r.pwrite(fd, &pattern(7, 10_000), 6).unwrap();
    r.close(fd).unwrap();
    assert_eq!(r.stat("/n1/small").unwrap().io_unit, 4096);
    let fd = w.open("/n1/small", libc::O_RDONLY, 0).unwrap();
    let got = w.pread(fd, 20_000, 0).unwrap();
    assert_eq!(&got[..6], b"header");
    assert!(
        got[6..] == pattern(7, 10_000),
        "across three units of a page"
    );
    w.close(fd).unwrap();
}

/// A client configured with an I/O unit gives it to the I/O-based files it writes first,
/// whatever its first write's length; the data reads back across the units.
#[test]
fn a_client_s_configured_io_unit_wins_over_its_first_write_s_length() {
    const XFER: usize = 47_008;
    let cl = Cluster::start(2);
    let opts = peakfs::client::ClientOptions {
        io_unit: Some(100_000),
        ..Cluster::options()
    };
    let mut w = peakfs::client::Client::connect(&cl.master_addr, opts).unwrap();
    w.mkdir("/n1", 0o755, Some(dir_of(DataDist::Io))).unwrap();
    let body = pattern(3, 9 * XFER);
    let fd = w.create("/n1/f", 0o644).unwrap();
    for k in 0..9 {
        w.pwrite(fd, &body[k * XFER..(k + 1) * XFER], (k * XFER) as u64)
            .unwrap();
    }
    w.close(fd).unwrap();
    let mut r = cl.client();
    assert_eq!(r.stat("/n1/f").unwrap().io_unit, 100_000);
    let fd = r.open("/n1/f", libc::O_RDONLY, 0).unwrap();
    assert!(r.pread(fd, body.len(), 0).unwrap() == body, "whole");
    let got = r.pread(fd, 3 * XFER, 99_000).unwrap();
    assert!(got == body[99_000..99_000 + 3 * XFER], "across units");
    r.close(fd).unwrap();
}

#[test]
fn a_directory_s_hints_apply_to_its_new_files_and_only_an_empty_file_changes_its_distribution() {
    const XFER: usize = 47_008;
    let cl = Cluster::start(2);
    let mut w = cl.client();
    let d = w.mkdir("/d", 0o755, Some(dir_of(DataDist::Block))).unwrap();
    let fd = w.create("/d/old", 0o644).unwrap();
    w.close(fd).unwrap();
    let a = w
        .set_hint(d.ino, Some(DataDist::Io), Some(XFER as u32))
        .unwrap();
    assert_eq!((a.hint, a.io_unit), (dir_of(DataDist::Io), XFER as u32));
    assert_eq!(w.stat("/d/old").unwrap().hint.data, DataDist::Block);
    // A new file is I/O-based with the directory's unit from its creation on: a first write
    // of another length does not change it.
    let body = pattern(4, 5 * XFER);
    let fd = w.create("/d/f", 0o644).unwrap();
    let f = w.stat("/d/f").unwrap();
    assert_eq!((f.hint.data, f.io_unit), (DataDist::Io, XFER as u32));
    for (k, piece) in body.chunks(10_000).enumerate().rev() {
        w.pwrite(fd, piece, (k * 10_000) as u64).unwrap();
    }
    w.close(fd).unwrap();
    let mut r = cl.client();
    assert_eq!(r.stat("/d/f").unwrap().io_unit, XFER as u32);
    let rfd = r.open("/d/f", libc::O_RDONLY, 0).unwrap();
    assert!(r.pread(rfd, body.len(), 0).unwrap() == body, "read back");
    r.close(rfd).unwrap();
    // Subdirectories take both; units outside 4 KiB..16 MiB and a file's unit are refused.
    let sub = w.mkdir("/d/sub", 0o755, None).unwrap();
    assert_eq!((sub.hint.data, sub.io_unit), (DataDist::Io, XFER as u32));
    assert_eq!(errno(w.set_hint(d.ino, None, Some(100))), libc::EINVAL);
    assert_eq!(errno(w.set_hint(d.ino, None, Some(32 << 20))), libc::EINVAL);
    assert_eq!(errno(w.set_hint(f.ino, None, Some(8192))), libc::EINVAL);
    // Without the directory's unit, the first write fixes it again.
    assert_eq!(w.set_hint(d.ino, None, Some(0)).unwrap().io_unit, 0);
    let fd = w.create("/d/g", 0o644).unwrap();
    assert_eq!(w.stat("/d/g").unwrap().io_unit, 0);
    w.pwrite(fd, &pattern(5, 8192), 0).unwrap();
    w.close(fd).unwrap();
    assert_eq!(r.stat("/d/g").unwrap().io_unit, 8192);

    // A file's own distribution changes while it is empty, and not once it holds data:
    // neither while this client's writes are uncommitted nor after.
    let fd = w.create("/e", 0o644).unwrap();
    let e = w.stat("/e").unwrap();
    assert_eq!(e.hint.data, DataDist::Block);
    let a = w.set_hint(e.ino, Some(DataDist::File), None).unwrap();
    assert_eq!(a.hint.data, DataDist::File);
    let data = pattern(6, 300_000);
    w.pwrite(fd, &data, 0).unwrap();
    assert_eq!(
        errno(w.set_hint(e.ino, Some(DataDist::Io), None)),
        libc::EBUSY
    );
    w.close(fd).unwrap();
    assert_eq!(
        errno(w.set_hint(e.ino, Some(DataDist::Block), None)),
        libc::EBUSY
    );
    assert_eq!(
        errno(r.set_hint(e.ino, Some(DataDist::Io), None)),
        libc::EBUSY
    );
    assert_eq!(r.stat("/e").unwrap().hint.data, DataDist::File);
    let rfd = r.open("/e", libc::O_RDONLY, 0).unwrap();
    assert!(
        r.pread(rfd, data.len(), 0).unwrap() == data,
        "file-based read back"
    );
    r.close(rfd).unwrap();
}

/// Another client changes a file's distribution while this one's writes to it are on their
/// way (the server allows it: it sees no size yet). Those bytes lie where the writer's
/// distribution put them, so the file must keep that one, or the writer must hear that its
/// bytes are lost.
/// Creates `{name}{k}` in a file-based directory for k = 0, 1, ... until the file's data lies
/// off its inode's slice (its writes reach the home slice only with the commit's SETATTR):
/// its path, open descriptor and ino.
fn remote_file(w: &mut peakfs::client::Client, name: &str, mode: u32) -> (String, u64, u64) {
    let layout = *w.layout();
    for k in 0.. {
        let path = format!("{name}{k}");
        let fd = w.create(&path, mode).unwrap();
        let ino = w.stat(&path).unwrap().ino;
        let data = layout.route(layout.data_lambda(ino, DataDist::File, 0));
        if data != layout.route(peakfs::placement::home_lambda(ino)) {
            return (path, fd, ino);
        }
        w.close(fd).unwrap();
    }
    unreachable!()
}

#[test]
fn a_distribution_changed_under_a_writer_yields_to_its_bytes_or_the_writer_hears_of_it() {
    let cl = Cluster::start(2);
    let mut w = cl.client();
    let mut h = cl.client();
    w.mkdir("/f", 0o755, Some(dir_of(DataDist::File))).unwrap();
    let read_back = |path: &str, len: usize| {
        let mut r = cl.client();
        let a = r.stat(path).unwrap();
        let fd = r.open(path, libc::O_RDONLY, 0).unwrap();
        let got = r.pread(fd, len + 1, 0).unwrap();
        r.close(fd).unwrap();
        (a.hint.data, got)
    };

    // 1. The commit brings the writer's distribution home: the file keeps it.
    let (a, fd, ino) = remote_file(&mut w, "/f/a", 0o644);
    let body = pattern(7, 300_000);
    w.pwrite(fd, &body, 0).unwrap();
    let changed = h.set_hint(ino, Some(DataDist::Block), None).unwrap();
    assert_eq!(changed.hint.data, DataDist::Block);
    w.close(fd).unwrap();
    let (dist, got) = read_back(&a, body.len());
    assert_eq!(dist, DataDist::File);
    assert!(got == body, "the bytes written before the change read back");

    // 2. A write that reaches the home slice itself (block 0 of a block-based file) does
    // the same, with no SETATTR after it.
    w.mkdir("/b", 0o755, Some(dir_of(DataDist::Block))).unwrap();
    let fd = w.create("/b/c", 0o644).unwrap();
    let ino = w.stat("/b/c").unwrap().ino;
    h.set_hint(ino, Some(DataDist::File), None).unwrap();
    let small = pattern(8, 3_901);
    w.pwrite(fd, &small, 0).unwrap();
    w.close(fd).unwrap();
    let (dist, got) = read_back("/b/c", small.len());
    assert_eq!(dist, DataDist::Block);
    assert!(
        got == small,
        "a small file written across a change reads back"
    );

    // 3. Once another writer has committed bytes by the new distribution, the first one's
    // commit is refused (EIO) and the file keeps the committed bytes.
    let (d, fd, ino) = remote_file(&mut w, "/f/d", 0o644);
    w.pwrite(fd, &pattern(9, 200_000), 0).unwrap();
    h.set_hint(ino, Some(DataDist::Block), None).unwrap();
    let mut x = cl.client();
    let xfd = x.open(&d, libc::O_WRONLY, 0).unwrap();
    let theirs = pattern(10, 5_000);
    x.pwrite(xfd, &theirs, 0).unwrap();
    x.close(xfd).unwrap();
    assert_eq!(errno(w.close(fd)), libc::EIO);
    let (dist, got) = read_back(&d, theirs.len());
    assert_eq!(dist, DataDist::Block);
    assert!(got == theirs, "the committed bytes are intact");
}

/// A write by a caller without CAP_FSETID drops the set-ID bits the file has when the write
/// lands, not those its writer last saw: here another client sets them after the writer
/// opened the file.
#[test]
fn a_write_drops_set_id_bits_another_client_set_after_the_writer_looked() {
    let cl = Cluster::start(2);
    let mut w = cl.client();
    let mut h = cl.client();
    let perm = |h: &mut peakfs::client::Client, path: &str| h.stat(path).unwrap().mode & 0o7777;
    let chmod = |h: &mut peakfs::client::Client, path: &str, mode: u32| {
        let ino = h.stat(path).unwrap().ino;
        let set = SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        h.setattr(ino, set).unwrap();
    };

    // 1. Bytes for the home slice (block 0 of a block-based file): its WRITE drops them.
    w.mkdir("/b", 0o755, Some(dir_of(DataDist::Block))).unwrap();
    let fd = w.create("/b/small", 0o755).unwrap();
    chmod(&mut h, "/b/small", 0o6755);
    w.drop_set_id_bits(fd).unwrap();
    w.pwrite(fd, &pattern(1, 3_901), 0).unwrap();
    w.close(fd).unwrap();
    assert_eq!(perm(&mut h, "/b/small"), 0o755);

    // 2. Bytes for other slices only: the commit drops them (with the size it brings home).
    w.mkdir("/f", 0o755, Some(dir_of(DataDist::File))).unwrap();
    let (path, fd, _) = remote_file(&mut w, "/f/big", 0o745);
    chmod(&mut h, &path, 0o6745);
    w.drop_set_id_bits(fd).unwrap();
    w.pwrite(fd, &pattern(2, 300_000), 0).unwrap();
    w.fsync(fd).unwrap();
    // Set-group-ID stays without group execute (it marks mandatory locking).
    assert_eq!(perm(&mut h, &path), 0o2745);
    // The commit took the request: later writes of the descriptor that need not drop any
    // bit leave one set since alone.
    chmod(&mut h, &path, 0o4745);
    w.pwrite(fd, &pattern(3, 10), 0).unwrap();
    w.close(fd).unwrap();
    assert_eq!(perm(&mut h, &path), 0o4745);

    // 3. A writer with CAP_FSETID (no drop asked for) keeps them.
    let fd = w.open("/b/small", libc::O_WRONLY, 0).unwrap();
    chmod(&mut h, "/b/small", 0o4755);
    w.pwrite(fd, &pattern(4, 100), 0).unwrap();
    w.close(fd).unwrap();
    assert_eq!(perm(&mut h, "/b/small"), 0o4755);
}

/// A change of attributes lands after the uncommitted writes that came before it from the same
/// client (their commit goes first), as on a local file system: tar sets each file's times
/// before it closes it.
#[test]
fn a_change_of_attributes_lands_after_the_writer_s_uncommitted_writes() {
    let cl = Cluster::start(2);
    let mut w = cl.client();
    w.mkdir("/t", 0o755, Some(dir_of(DataDist::File))).unwrap();
    let set = |w: &mut peakfs::client::Client, ino: u64, set: SetAttr| {
        w.setattr(ino, set).unwrap();
    };

    // 1. Times set between the writes and the close stay (tar's order).
    let (a, fd, ino) = remote_file(&mut w, "/t/times", 0o644);
    w.pwrite(fd, &pattern(1, 300_000), 0).unwrap();
    let then = 981_173_106_123_456_789;
    let times = SetAttr {
        atime_ns: Some(then),
        mtime_ns: Some(then),
        ..SetAttr::default()
    };
    set(&mut w, ino, times);
    w.close(fd).unwrap();
    let st = cl.client().stat(&a).unwrap();
    assert_eq!((st.size, st.mtime_ns, st.atime_ns), (300_000, then, then));

    // 2. A truncate below uncommitted writes drops their bytes past it: extended again, the
    //    file reads zeros there, not the old bytes. (The truncate saw the writes' size before
    //    their commit went first too: the client's stat counts its uncommitted writes.)
    let (b, fd, ino) = remote_file(&mut w, "/t/truncated", 0o644);
    let body = pattern(2, 300_000);
    w.pwrite(fd, &body, 0).unwrap();
    for size in [100, 300_000] {
        let resize = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        set(&mut w, ino, resize);
    }
    w.close(fd).unwrap();
    let mut r = cl.client();
    let fd = r.open(&b, libc::O_RDONLY, 0).unwrap();
    let got = r.pread(fd, 300_001, 0).unwrap();
    r.close(fd).unwrap();
    assert_eq!(got.len(), 300_000);
    assert!(
        got[..100] == body[..100],
        "the bytes before the truncate stay"
    );
    assert!(
        got[100..].iter().all(|&b| b == 0),
        "the bytes past it read as zeros"
    );

    // 3. A set-ID bit set after a write that drops them stays: the write's drop came first.
    let (c, fd, ino) = remote_file(&mut w, "/t/set-id", 0o755);
    w.drop_set_id_bits(fd).unwrap();
    w.pwrite(fd, &pattern(3, 300_000), 0).unwrap();
    let chmod = SetAttr {
        mode: Some(0o4755),
        ..SetAttr::default()
    };
    set(&mut w, ino, chmod);
    w.close(fd).unwrap();
    assert_eq!(cl.client().stat(&c).unwrap().mode & 0o7777, 0o4755);
}

/// The mtime of written bytes is the time of the write, as on a local file system, also for
/// bytes on other slices, whose commit carries it home later: the writer's stat shows it
/// before the commit, everyone's after.
#[test]
fn the_mtime_of_a_write_is_its_time_not_its_commit_s() {
    let now = || {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        i64::try_from(t.unwrap().as_nanos()).unwrap()
    };
    let cl = Cluster::start(2);
    let mut w = cl.client();
    w.mkdir("/m", 0o755, Some(dir_of(DataDist::File))).unwrap();
    let (path, fd, _) = remote_file(&mut w, "/m/late-close", 0o644);
    let before = now();
    w.pwrite(fd, &pattern(1, 300_000), 0).unwrap();
    let written = now();
    std::thread::sleep(Duration::from_millis(50));
    let seen = w.stat(&path).unwrap().mtime_ns;
    assert!(
        (before..=written).contains(&seen),
        "the writer sees its write's time"
    );
    w.close(fd).unwrap();
    let committed = cl.client().stat(&path).unwrap().mtime_ns;
    assert_eq!(
        committed, seen,
        "the commit 50 ms later brings that time home"
    );
}

#[test]
fn writes_are_visible_to_other_clients_after_close_or_fsync() {
    let cl = Cluster::start(2);
    let mut w = cl.client();
    let mut r = cl.client();
    let fd = w.create("/shared", 0o644).unwrap();
    w.write(fd, &pattern(1, 70_000)).unwrap();
    w.fsync(fd).unwrap();
    assert_eq!(r.stat("/shared").unwrap().size, 70_000);
    let rfd = r.open("/shared", libc::O_RDONLY, 0).unwrap();
    assert_eq!(r.pread(rfd, 70_000, 0).unwrap(), pattern(1, 70_000));
    r.close(rfd).unwrap();
    w.write(fd, &pattern(2, 5000)).unwrap();
    w.close(fd).unwrap();
    let rfd = r.open("/shared", libc::O_RDONLY, 0).unwrap();
    assert_eq!(r.pread(rfd, 5000, 70_000).unwrap(), pattern(2, 5000));
    r.close(rfd).unwrap();
}

#[test]
fn a_small_file_takes_two_rpcs_to_write_and_one_to_remove_and_is_visible_after_close() {
    let cl = Cluster::start(2);
    let mut w = cl.client();
    let mut r = cl.client();
    w.mkdir("/d", 0o755, None).unwrap();
    // Warm the dentry cache and the parent's hint.
    let fd = w.create("/d/warm", 0o644).unwrap();
    w.close(fd).unwrap();
    let sent = w.rpcs_sent();
    let fd = w
        .open(
            "/d/small",
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY,
            0o644,
        )
        .unwrap();
    w.write(fd, &pattern(3, 3901)).unwrap();
    w.close(fd).unwrap();
    assert_eq!(
        w.rpcs_sent() - sent,
        2,
        "CREATE + WRITE: the WRITE at the home slice raised the size, no SETATTR"
    );
    assert_eq!(r.stat("/d/small").unwrap().size, 3901);
    let rfd = r.open("/d/small", libc::O_RDONLY, 0).unwrap();
    assert_eq!(r.pread(rfd, 3901, 0).unwrap(), pattern(3, 3901));
    r.close(rfd).unwrap();
    let sent = w.rpcs_sent();
    w.unlink("/d/small").unwrap();
    assert_eq!(w.rpcs_sent() - sent, 1, "one UNLINK, no LOOKUP");
    assert_eq!(errno(r.stat("/d/small")), libc::ENOENT);
}

#[test]
fn a_dead_server_gives_an_error_after_the_timeout_not_a_hang() {
    let mut cl = Cluster::start(2);
    let mut c = cl.client();
    c.mkdir("/d", 0o755, None).unwrap();
    // SIGSTOP: the server keeps its sockets open but answers nothing.
    for s in &cl.servers {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(s.child.id() as i32, libc::SIGSTOP) }, 0);
    }
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let e = c.stat("/d").expect_err("a stopped cluster answered");
    assert!(
        matches!(
            e,
            ClientError::Unreachable {
                timed_out: true,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    for s in &cl.servers {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(s.child.id() as i32, libc::SIGCONT) };
    }
    // Killed outright: connecting fails fast or times out, never hangs.
    for s in cl.servers.drain(..) {
        drop(s);
    }
    let t = Instant::now();
    assert!(c.stat("/d").is_err());
    assert!(t.elapsed() < Duration::from_secs(15));
    assert_eq!(Errno::ENOENT.0, libc::ENOENT);
}

/// The hint of a regular directory whose files get distribution `data`.
fn dir_of(data: DataDist) -> Hint {
    Hint {
        data,
        bigdir: false,
    }
}

fn big() -> Hint {
    Hint {
        bigdir: true,
        ..Hint::default()
    }
}

#[test]
fn hard_links_across_slices_share_one_inode_that_the_last_unlink_frees() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    c.mkdir("/reg", 0o755, None).unwrap();
    c.mkdir("/big", 0o755, Some(big())).unwrap();
    let data = pattern(7, 300_000);
    let fd = c.create("/reg/f", 0o644).unwrap();
    c.write(fd, &data).unwrap();
    c.close(fd).unwrap();
    let f = c.stat("/reg/f").unwrap();
    let inodes = c.statfs().unwrap().inodes_used;

    // Names in the bigdir land on the inode's slice (one LINK) or on others (SETATTR at the
    // inode's home, then LINK): take two of each.
    let layout = *c.layout();
    let home = layout.route(peakfs::placement::home_lambda(f.ino));
    let (mut here, mut away) = (Vec::new(), Vec::new());
    for i in 0..200 {
        let name = format!("l{i}");
        let l = layout.dentry_lambda(c.stat("/big").unwrap().ino, true, name.as_bytes());
        let v = if layout.route(l) == home {
            &mut here
        } else {
            &mut away
        };
        if v.len() < 2 {
            v.push(format!("/big/{name}"));
        }
    }
    assert!(here.len() == 2 && away.len() == 2, "{here:?} {away:?}");
    let mut names = vec!["/reg/f".to_string(), "/reg/g".to_string()];
    names.extend(here.into_iter().chain(away));
    let mut ctime = f.ctime_ns;
    for (n, to) in names.iter().enumerate().skip(1) {
        let a = c.link("/reg/f", to).unwrap();
        assert_eq!((a.ino, a.nlink), (f.ino, n as u32 + 1), "{to}");
        assert!(a.ctime_ns > ctime, "{to}: link changes the file's ctime");
        ctime = a.ctime_ns;
    }
    for n in &names {
        let a = c.stat(n).unwrap();
        assert_eq!((a.ino, a.nlink, a.size), (f.ino, 6, 300_000), "{n}");
    }
    assert_eq!(c.statfs().unwrap().inodes_used, inodes, "no new inode");
    assert_eq!(errno(c.link("/reg/f", "/reg/g")), libc::EEXIST);
    // On another slice than the inode: the count raised first is lowered again.
    assert_eq!(errno(c.link("/reg/f", &names[5])), libc::EEXIST);
    assert_eq!(errno(c.link("/big", "/reg/dirlink")), libc::EPERM);
    assert_eq!(errno(c.link("/reg/nothing", "/reg/x")), libc::ENOENT);
    assert_eq!(
        c.stat("/reg/f").unwrap().nlink,
        6,
        "failed links change nothing"
    );

    // Renaming another file over a link drops that link only.
    let fd = c.create("/reg/other", 0o644).unwrap();
    c.close(fd).unwrap();
    c.rename("/reg/other", &names[4]).unwrap();
    assert_eq!(c.stat("/reg/f").unwrap().nlink, 5);
    names.remove(4);

    // Unlinks drop one link each; the data stays until the last.
    for (k, n) in names.iter().enumerate() {
        let left = names.len() - k;
        let fd = c.open(&names[names.len() - 1], libc::O_RDONLY, 0).unwrap();
        assert!(c.pread(fd, data.len(), 0).unwrap() == data, "{left} links");
        c.close(fd).unwrap();
        c.unlink(n).unwrap();
        assert_eq!(errno(c.stat(n)), libc::ENOENT);
        match c.getattr(f.ino) {
            Ok(a) => assert_eq!(a.nlink as usize, left - 1, "after unlinking {n}"),
            Err(e) => assert!(left == 1 && e.errno() == libc::ENOENT, "{n}: {e}"),
        }
    }
    // The renamed-over file is one inode more than before; the linked file is gone.
    assert_eq!(c.statfs().unwrap().inodes_used, inodes);
}

#[test]
fn directory_link_counts_follow_mkdir_rmdir_and_rename_between_parents() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    let root = c.stat("/").unwrap().nlink;
    c.mkdir("/p1", 0o755, None).unwrap();
    c.mkdir("/p2", 0o755, Some(big())).unwrap();
    assert_eq!(c.stat("/").unwrap().nlink, root + 2);
    let n = |c: &mut peakfs::client::Client| {
        (c.stat("/p1").unwrap().nlink, c.stat("/p2").unwrap().nlink)
    };
    assert_eq!(n(&mut c), (2, 2));
    // In a regular directory the parent's slice changes its count; a bigdir's children sit
    // on other slices too, whose changes the client sends to the parent's home.
    for i in 0..4 {
        c.mkdir(&format!("/p1/a{i}"), 0o755, None).unwrap();
        c.mkdir(&format!("/p2/b{i}"), 0o755, None).unwrap();
    }
    let fd = c.create("/p1/file", 0o644).unwrap();
    c.close(fd).unwrap();
    assert_eq!(n(&mut c), (6, 6), "files do not count");
    c.rename("/p1/a0", "/p2/a0").unwrap();
    assert_eq!(n(&mut c), (5, 7));
    c.rename("/p2/b0", "/p2/b0.renamed").unwrap();
    assert_eq!(n(&mut c), (5, 7), "a rename within a directory");
    // Over an empty directory: p1 loses a1 and gains b1.
    c.rename("/p2/b1", "/p1/a1").unwrap();
    assert_eq!(n(&mut c), (5, 6));
    c.rename("/p1/file", "/p2/file").unwrap();
    assert_eq!(n(&mut c), (5, 6), "moving a file");
    for e in c.readdir("/p1").unwrap() {
        c.rmdir(&format!("/p1/{}", String::from_utf8_lossy(&e.name)))
            .unwrap();
    }
    for e in c.readdir("/p2").unwrap() {
        let path = format!("/p2/{}", String::from_utf8_lossy(&e.name));
        if e.mode & libc::S_IFMT == libc::S_IFDIR {
            c.rmdir(&path).unwrap();
        } else {
            c.unlink(&path).unwrap();
        }
    }
    assert_eq!(n(&mut c), (2, 2));
    c.rmdir("/p1").unwrap();
    c.rmdir("/p2").unwrap();
    assert_eq!(c.stat("/").unwrap().nlink, root);
}

#[test]
fn a_file_unlinked_or_replaced_while_open_stays_usable_until_its_last_close() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    c.mkdir("/d", 0o755, None).unwrap();
    let inodes = c.statfs().unwrap().inodes_used;
    let fd = c.create("/d/f", 0o644).unwrap();
    c.write(fd, &pattern(1, 150_000)).unwrap();
    let fd2 = c.open("/d/f", libc::O_RDWR, 0).unwrap();
    let ino = c.fstat(fd).unwrap().ino;
    c.unlink("/d/f").unwrap();
    assert_eq!(errno(c.stat("/d/f")), libc::ENOENT);
    assert!(c.readdir("/d").unwrap().is_empty());
    let a = c.fstat(fd).unwrap();
    assert_eq!((a.nlink, a.size), (0, 150_000), "an open unlinked file");
    c.pwrite(fd, b"still here", 150_000).unwrap();
    c.fsync(fd).unwrap();
    assert_eq!(c.pread(fd2, 10, 150_000).unwrap(), b"still here");
    assert!(c.pread(fd2, 150_000, 0).unwrap() == pattern(1, 150_000));
    c.close(fd).unwrap();
    assert_eq!(c.fstat(fd2).unwrap().nlink, 0, "one descriptor still open");
    c.close(fd2).unwrap();
    assert_eq!(
        errno(c.getattr(ino)),
        libc::ENOENT,
        "freed at the last close"
    );
    assert_eq!(c.statfs().unwrap().inodes_used, inodes);

    // Renaming over an open file: the reader keeps the old content.
    for (name, seed) in [("/d/g", 2), ("/d/h", 3)] {
        let fd = c.create(name, 0o644).unwrap();
        c.write(fd, &pattern(seed, 5000)).unwrap();
        c.close(fd).unwrap();
    }
    let reader = c.open("/d/g", libc::O_RDONLY, 0).unwrap();
    let old = c.fstat(reader).unwrap().ino;
    c.rename("/d/h", "/d/g").unwrap();
    assert_eq!(c.pread(reader, 5000, 0).unwrap(), pattern(2, 5000));
    c.close(reader).unwrap();
    assert_eq!(errno(c.getattr(old)), libc::ENOENT);
    let fd = c.open("/d/g", libc::O_RDONLY, 0).unwrap();
    assert_eq!(c.pread(fd, 5000, 0).unwrap(), pattern(3, 5000));
    c.close(fd).unwrap();
    // A file not open here is freed at once even while other files are open.
    let fd = c.create("/d/busy", 0o644).unwrap();
    c.unlink("/d/g").unwrap();
    c.close(fd).unwrap();
    c.unlink("/d/busy").unwrap();
    assert_eq!(c.statfs().unwrap().inodes_used, inodes);
}

#[test]
fn device_numbers_round_trip_through_mknod_and_stat() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    let who = peakfs::client::Caller { uid: 0, gid: 0 };
    let root = c.stat("/").unwrap().ino;
    for (name, ty, rdev) in [
        (&b"chr"[..], libc::S_IFCHR, 0x0501),
        (b"blk", libc::S_IFBLK, 0x0803),
    ] {
        let a = c.mknod_at(root, name, ty | 0o600, rdev, true, who).unwrap();
        assert_eq!((a.mode, a.rdev), (ty | 0o600, rdev));
        let path = format!("/{}", String::from_utf8_lossy(name));
        assert_eq!(c.stat(&path).unwrap().rdev, rdev);
    }
}

#[test]
fn a_benchmark_burst_fails_when_a_reply_is_an_error() {
    let cl = Cluster::start(1);
    let mut c = cl.client();
    c.echo(0, b"ping", 20, 4).unwrap();
    c.xfer(0, &[1; 1000], 4096, 20, 4).unwrap();
    // Requests asking for more than a frame holds: the burst reports their refusal (a
    // ceiling measured over refused requests would be a wrong ceiling), and the connection
    // keeps serving.
    let too_long = peakfs::protocol::MAX_IO + 1;
    assert_eq!(errno(c.xfer(0, &[], too_long, 3, 2)), libc::EINVAL);
    c.xfer(0, &[], 4096, 5, 2).unwrap();
}

#[test]
fn file_based_files_made_together_in_a_directory_go_to_a_slice_each() {
    // 2 servers x 2 workers: 4 slices; clients making their N-N files in one directory.
    let cl = Cluster::start(2);
    let mut setup = cl.client();
    let nn = dir_of(DataDist::File);
    setup.mkdir("/nn", 0o755, Some(nn)).unwrap();
    let mut clients: Vec<_> = (0..4).map(|_| cl.client()).collect();
    let mut slices = std::collections::HashSet::new();
    for (r, c) in clients.iter_mut().enumerate() {
        let fd = c.create(&format!("/nn/f{r}"), 0o644).unwrap();
        c.pwrite(fd, &pattern(r as u64, 300_000), 0).unwrap();
        c.close(fd).unwrap();
        let ino = c.stat(&format!("/nn/f{r}")).unwrap().ino;
        let layout = *c.layout();
        slices.insert(layout.route(layout.data_lambda(ino, DataDist::File, 0)));
    }
    assert_eq!(slices.len(), 4, "one file per slice: {slices:?}");
    for (r, c) in clients.iter_mut().enumerate() {
        let fd = c.open(&format!("/nn/f{r}"), libc::O_RDONLY, 0).unwrap();
        assert!(c.pread(fd, 300_000, 0).unwrap() == pattern(r as u64, 300_000));
        c.close(fd).unwrap();
    }
}

#[test]
fn a_full_write_pipeline_waits_for_its_oldest_write_not_for_the_first_server() {
    let cl = Cluster::start(2);
    let opts = peakfs::client::ClientOptions {
        max_unfinished: 2,
        ..Cluster::options()
    };
    let mut c = peakfs::client::Client::connect(&cl.master_addr, opts).unwrap();
    let io = dir_of(DataDist::Io);
    c.mkdir("/n1", 0o755, Some(io)).unwrap();
    let fd = c.create("/n1/f", 0o644).unwrap();
    let ino = c.stat("/n1/f").unwrap().ino;
    let layout = *c.layout();
    // 4 KiB transfers of an I/O-based file: two that go to server 1, one to server 0.
    let on = |server: u32| {
        (0u64..).map(|k| k * 4096).filter(move |&o| {
            layout
                .route(layout.data_lambda(ino, DataDist::Io, o))
                .server
                == server
        })
    };
    let (a1, a2) = {
        let mut s1 = on(1);
        (s1.next().unwrap(), s1.next().unwrap())
    };
    let b = on(0).next().unwrap();
    c.pwrite(fd, &pattern(1, 4096), a1).unwrap();
    // Server 0 takes the next write but answers nothing for now.
    let s0 = &cl.servers[0];
    let pid = s0.child.id() as i32;
    // SAFETY: kill(2) on our own child's pid.
    let sent = unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert_eq!(sent, 0);
    c.pwrite(fd, &pattern(2, 4096), b).unwrap();
    // The pipeline is full (2): the next write waits for the oldest, server 1's, not for
    // server 0, which holds the other one.
    let t = Instant::now();
    c.pwrite(fd, &pattern(3, 4096), a2).unwrap();
    let waited = t.elapsed();
    let pid = s0.child.id() as i32;
    // SAFETY: kill(2) on our own child's pid.
    let sent = unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(sent, 0);
    assert!(waited < Duration::from_secs(2), "waited {waited:?}");
    c.close(fd).unwrap();
    let fd = c.open("/n1/f", libc::O_RDONLY, 0).unwrap();
    for (seed, at) in [(1, a1), (2, b), (3, a2)] {
        assert!(
            c.pread(fd, 4096, at).unwrap() == pattern(seed, 4096),
            "at {at}"
        );
    }
    c.close(fd).unwrap();
}

#[test]
fn a_strided_reader_keeps_its_next_transfers_in_flight() {
    let cl = Cluster::start(2);
    const XFER: usize = 5000;
    let mut w = cl.client();
    let io = dir_of(DataDist::Io);
    w.mkdir("/n1", 0o755, Some(io)).unwrap();
    let fd = w.create("/n1/shared", 0o644).unwrap();
    for k in 0..40u64 {
        w.pwrite(fd, &pattern(k, XFER), k * XFER as u64).unwrap();
    }
    w.close(fd).unwrap();
    // A reader taking every 4th transfer (an N-1 rank's share), read-ahead of 4 transfers.
    let opts = peakfs::client::ClientOptions {
        read_ahead: 4 * XFER,
        ..Cluster::options()
    };
    let mut r = peakfs::client::Client::connect(&cl.master_addr, opts).unwrap();
    let fd = r.open("/n1/shared", libc::O_RDWR, 0).unwrap();
    let mut rpcs = Vec::new();
    for k in (1..40u64).step_by(4) {
        let sent = r.rpcs_sent();
        assert!(
            r.pread(fd, XFER, k * XFER as u64).unwrap() == pattern(k, XFER),
            "transfer {k}"
        );
        rpcs.push(r.rpcs_sent() - sent);
    }
    // Two reads show the stride; the third sends itself and the next three, and every read
    // after sends the one that keeps four in flight, until the end of the file: each transfer
    // read once.
    assert_eq!(rpcs, [1, 1, 4, 1, 1, 1, 1, 0, 0, 0], "requests per read");
    // A write through the descriptor drops what was read ahead.
    r.pwrite(fd, &pattern(99, XFER), 37 * XFER as u64).unwrap();
    assert!(r.pread(fd, XFER, 37 * XFER as u64).unwrap() == pattern(99, XFER));
    r.close(fd).unwrap();
    // Tiny reads farther apart than the read-ahead (of a block-based file): at most 64
    // fetched together, not the 2,000 the read-ahead would hold (4 x 5,000 bytes / 10).
    let body = pattern(5, 2_000_000);
    let fd = w.create("/blocks", 0o644).unwrap();
    w.pwrite(fd, &body, 0).unwrap();
    w.close(fd).unwrap();
    let fd = r.open("/blocks", libc::O_RDONLY, 0).unwrap();
    let mut sent = Vec::new();
    for k in 0..3usize {
        let before = r.rpcs_sent();
        let got = r.pread(fd, 10, (k * 30_000) as u64).unwrap();
        assert!(got == body[k * 30_000..k * 30_000 + 10], "tiny read {k}");
        sent.push(r.rpcs_sent() - before);
    }
    assert_eq!(sent, [1, 1, 64]);
    let last = 65 * 30_000;
    assert!(r.pread(fd, 10, last as u64).unwrap() == body[last..last + 10]);
    r.close(fd).unwrap();
}

/// A random reader gets what it asks for and nothing more: each 4 KiB read away from where
/// the last one ended is one READ (in block-based and file-based files), with no read-ahead
/// for the next read to throw away. A read that goes on where the last one ended starts the
/// read-ahead, and so does a first read at offset 0.
#[test]
fn a_random_reader_sends_no_read_ahead_and_a_sequential_one_starts_it() {
    const PIECE: usize = peakfs::client::readahead::READ_PIECE as usize;
    let cl = Cluster::start(2);
    let mut w = cl.client();
    let body = pattern(11, 16 * PIECE);
    for (dir, dist) in [("/rb", DataDist::Block), ("/rf", DataDist::File)] {
        w.mkdir(dir, 0o755, Some(dir_of(dist))).unwrap();
        let fd = w.create(&format!("{dir}/f"), 0o644).unwrap();
        w.pwrite(fd, &body, 0).unwrap();
        w.close(fd).unwrap();
        let mut r = cl.client();
        let fd = r.open(&format!("{dir}/f"), libc::O_RDONLY, 0).unwrap();
        let mut read = |at: usize| {
            let sent = r.rpcs_sent();
            assert!(
                r.pread(fd, 4096, at as u64).unwrap() == body[at..at + 4096],
                "{dir} at {at}"
            );
            r.rpcs_sent() - sent
        };
        // Scattered 4 KiB reads, none where the one before ended (and none at 0).
        let scattered: Vec<u64> = [9, 2, 14, 5, 11, 1, 7]
            .iter()
            .map(|&k| read(k * PIECE + 8192))
            .collect();
        assert_eq!(scattered, [1; 7], "{dir}: requests per random read");
        // Where the last read ended: read-ahead starts (the read and more), and the next
        // sequential read finds its bytes already sent.
        let at = 7 * PIECE + 8192 + 4096;
        assert!(
            read(at) > 1,
            "{dir}: a sequential read starts the read-ahead"
        );
        assert_eq!(read(at + 4096), 0, "{dir}: the next one is served from it");
        r.close(fd).unwrap();
        // A first read at 0 is a sequential reader's.
        let fd = r.open(&format!("{dir}/f"), libc::O_RDONLY, 0).unwrap();
        let sent = r.rpcs_sent();
        assert!(r.pread(fd, 4096, 0).unwrap() == body[..4096]);
        assert!(
            r.rpcs_sent() - sent > 1,
            "{dir}: read-ahead from the first read at 0"
        );
        r.close(fd).unwrap();
    }
}

/// A sequential reader of a file-based file: its read-ahead goes out as READs of
/// `READ_PIECE` bytes, each byte read once, and a read returns the right bytes whether it
/// takes one piece whole, parts of two, or crosses the end of the file. A write through the
/// descriptor drops the reads in flight; the read after it sees the write.
#[test]
fn a_sequential_reader_keeps_its_read_ahead_in_flight_as_pieces() {
    const PIECE: usize = peakfs::client::readahead::READ_PIECE as usize;
    let cl = Cluster::start(2);
    let file = dir_of(DataDist::File);
    let mut w = cl.client();
    w.mkdir("/seq", 0o755, Some(file)).unwrap();
    let body = pattern(7, 10 * PIECE + 1234);
    let fd = w.create("/seq/f", 0o644).unwrap();
    w.pwrite(fd, &body, 0).unwrap();
    w.close(fd).unwrap();
    let opts = peakfs::client::ClientOptions {
        read_ahead: 4 * PIECE,
        ..Cluster::options()
    };
    let mut r = peakfs::client::Client::connect(&cl.master_addr, opts).unwrap();
    let fd = r.open("/seq/f", libc::O_RDWR, 0).unwrap();
    let mut rpcs = Vec::new();
    let mut at = 0;
    // Whole pieces, then reads that straddle pieces, then one past the end.
    let lens = [
        PIECE,
        PIECE,
        PIECE / 2,
        PIECE,
        PIECE,
        PIECE / 2,
        3 * PIECE,
        4 * PIECE,
    ];
    for len in lens {
        let sent = r.rpcs_sent();
        let got = r.pread(fd, len, at as u64).unwrap();
        let want = &body[at.min(body.len())..(at + len).min(body.len())];
        assert!(got == want, "read of {len} at {at}");
        rpcs.push(r.rpcs_sent() - sent);
        at += len;
    }
    // 11 pieces in all (the last one short), each sent once; the read past the end asks the
    // size first (GETATTR).
    assert_eq!(rpcs, [4, 1, 1, 0, 1, 1, 1, 3], "requests per read");
    assert!(r.pread(fd, 10, body.len() as u64).unwrap().is_empty());
    // Back to the start: the reads in flight go, the new ones read the file again.
    assert!(r.pread(fd, PIECE, 0).unwrap() == body[..PIECE]);
    // A piece ahead, in flight or arrived, is dropped by a write through the descriptor.
    let patch = pattern(8, 1000);
    r.pwrite(fd, &patch, 2 * PIECE as u64 + 10).unwrap();
    let got = r.pread(fd, PIECE, PIECE as u64 * 2).unwrap();
    assert!(got[10..1010] == patch[..] && got[..10] == body[2 * PIECE..2 * PIECE + 10]);
    r.close(fd).unwrap();
}

/// A server's refusal reaches the client with its message: a slice out of inode slots says
/// which format option sets them, and the error still maps to ENOSPC.
#[test]
fn a_full_slice_tells_the_client_which_option_sets_its_inode_slots() {
    // 32 MiB zones at 1 MiB per inode: a few dozen slots each.
    let cl = Cluster::start_with(1, &["--bytes-per-inode=1048576"]);
    let mut c = cl.client();
    let err = (0..10_000)
        .find_map(|i| {
            let fd = c.open(&format!("/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644);
            fd.and_then(|fd| c.close(fd)).err()
        })
        .expect("the slices never filled up");
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    assert!(err.is(Errno::ENOSPC));
    assert!(matches!(err, ClientError::Refused { .. }), "{err:?}");
    assert!(err.to_string().contains("--bytes-per-inode"), "{err}");
}

#[test]
fn the_cli_shows_and_changes_hints_and_says_why_it_refuses() {
    let cl = Cluster::start(2);
    let hint = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_peakfs"))
            .args(["--master", &cl.master_addr, "hint"])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(if out.status.success() {
            &out.stdout
        } else {
            &out.stderr
        });
        (out.status.success(), text.into_owned())
    };
    let mut c = cl.client();
    c.mkdir("/d", 0o755, Some(dir_of(DataDist::Block))).unwrap();
    assert_eq!(hint(&["/d"]), (true, "/d: dist block io_unit 0\n".into()));
    assert_eq!(
        hint(&["/d", "--set-dist", "io", "--set-io-unit", "47008"]),
        (true, "/d: dist io io_unit 47008\n".into())
    );
    let (ok, why) = hint(&["/d", "--set-dist", "io,bigdir"]);
    assert!(!ok && why.contains("from its mkdir on"), "{why}");
    let (ok, why) = hint(&["/d", "--set-io-unit", "12"]);
    assert!(!ok && why.contains("4096..=16777216"), "{why}");
    let fd = c.create("/d/f", 0o644).unwrap();
    c.write(fd, b"bytes").unwrap();
    c.close(fd).unwrap();
    assert_eq!(c.stat("/d/f").unwrap().io_unit, 47_008);
    let (ok, why) = hint(&["/d/f", "--set-dist", "block"]);
    assert!(!ok && why.contains("only while it is empty"), "{why}");
}

/// The small tools: a file put in comes back whole, `ls`, `stat` and `df` print what the
/// client library sees (as text and as JSON), and a refusal names the path it is about.
#[test]
fn the_cli_tools_copy_list_stat_and_name_the_path_in_errors() {
    let cl = Cluster::start(2);
    let dir = tempfile::tempdir().unwrap();
    let peakfs = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_peakfs"))
            .args(["--master", &cl.master_addr])
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    };
    let ok = |args: &[&str]| {
        let (ok, stdout, stderr) = peakfs(args);
        assert!(ok, "peakfs {args:?}: {stderr}");
        stdout
    };
    let body = pattern(21, 1_500_000);
    let local = dir.path().join("in");
    std::fs::write(&local, &body).unwrap();
    ok(&["mkdir", "/cli"]);
    ok(&["mkdir", "/cli/sub"]);
    ok(&["put", local.to_str().unwrap(), "/cli/f"]);
    let back = dir.path().join("out");
    ok(&["get", "/cli/f", back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == body);

    // A reader that stops early: `get` ends quietly and with success, as `cat | head` does.
    let mut head = std::process::Command::new(env!("CARGO_BIN_EXE_peakfs"))
        .args(["--master", &cl.master_addr, "get", "/cli/f", "-"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    std::io::Read::read_exact(head.stdout.as_mut().unwrap(), &mut first).unwrap();
    assert!(first == body[..10]);
    drop(head.stdout.take());
    let out = head.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty(),
        "{:?}: {stderr}",
        out.status
    );

    assert_eq!(ok(&["ls", "/cli"]), "f\nsub/\n");
    let mut c = cl.client();
    let f = c.stat("/cli/f").unwrap();
    let long = ok(&["ls", "-l", "/cli"]);
    let lines: Vec<_> = long.lines().collect();
    assert_eq!(lines.len(), 2, "{long}");
    assert!(lines[0].starts_with("-rw-r--r--   1 "), "{long}");
    let fields: Vec<_> = lines[0].split_whitespace().collect();
    assert_eq!(fields[4], "1500000", "{long}");
    assert_eq!(fields.last(), Some(&"f"));
    assert!(
        lines[1].starts_with("drwxr-xr-x") && lines[1].ends_with(" sub"),
        "{long}"
    );
    let listing: serde_json::Value =
        serde_json::from_str(&ok(&["ls", "--json", "-l", "/cli"])).unwrap();
    assert_eq!(listing[0]["name"], "f");
    assert_eq!(listing[0]["ino"], f.ino);
    assert_eq!(listing[0]["attr"]["size"], 1_500_000);
    assert_eq!(listing[1]["type"], "directory");

    let text = ok(&["stat", "/cli/f"]);
    assert!(
        text.contains("  File: /cli/f\n") && text.contains("regular file"),
        "{text}"
    );
    assert!(
        text.contains(&format!(" Inode: {:<15} Links: 1\n", f.ino)),
        "{text}"
    );
    assert!(text.contains("Access: (0644/-rw-r--r--)"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&ok(&["stat", "--json", "/cli/f"])).unwrap();
    assert_eq!(json["size"], 1_500_000);
    assert_eq!(json["mtime_ns"], f.mtime_ns);
    assert_eq!(json["ctime_ns"], f.ctime_ns);

    let usage = c.statfs().unwrap();
    let df: serde_json::Value = serde_json::from_str(&ok(&["df", "--json"])).unwrap();
    assert_eq!(df["bytes_total"], usage.bytes_total);
    assert_eq!(df["inodes_used"], usage.inodes_used);
    assert!(usage.bytes_used >= body.len() as u64, "{usage:?}");
    assert_eq!(ok(&["df"]).lines().count(), 2);
    // Per slice (2 servers of 2 workers): the slices add up to the cluster, and the file's
    // 1.5 MB of 64 KiB blocks went to more than one of them.
    let text = ok(&["df", "--slices"]);
    let firsts: Vec<_> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        firsts,
        ["Slice", "0/0", "0/1", "1/0", "1/1", "total"],
        "{text}"
    );
    let df: serde_json::Value = serde_json::from_str(&ok(&["df", "--slices", "--json"])).unwrap();
    let slices = df["slices"].as_array().unwrap();
    let sum = |key: &str| slices.iter().map(|s| s[key].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("bytes_total"), usage.bytes_total);
    assert_eq!(sum("inodes_total"), usage.inodes_total);
    let holding = slices
        .iter()
        .filter(|s| s["bytes_used"].as_u64() > Some(0))
        .count();
    assert!(holding > 1, "{df}");

    // Each refusal: one line that names the path, then the errno's text.
    for (args, want) in [
        (&["mkdir", "/cli"][..], "peakfs: /cli: File exists"),
        (
            &["get", "/cli/nope", "-"],
            "peakfs: /cli/nope: No such file or directory",
        ),
        (&["rmdir", "/cli"], "peakfs: /cli: Directory not empty"),
        (&["rm", "/cli/sub"], "peakfs: /cli/sub: Is a directory"),
        (
            &["mv", "/cli/zz", "/cli/yy"],
            "peakfs: /cli/zz -> /cli/yy: No such file or directory",
        ),
        (&["ls", "/cli/f"], "peakfs: /cli/f: Not a directory"),
        (
            &["stat", "/nope/x"],
            "peakfs: /nope/x: No such file or directory",
        ),
    ] {
        let (ok, _, stderr) = peakfs(args);
        assert!(
            !ok && stderr.starts_with(want) && stderr.lines().count() == 1,
            "{args:?}: {stderr}"
        );
    }
}

/// rename(2)'s EINVAL for a directory moved below itself (through the path API, which the
/// kernel does not guard as it guards the mount): refused at any depth, with the tree left
/// whole; a name that only begins with the directory's name is no descendant.
#[test]
fn a_directory_cannot_be_renamed_below_itself() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    c.mkdir("/c", 0o755, None).unwrap();
    c.mkdir("/c/e", 0o755, None).unwrap();
    c.mkdir("/cd", 0o755, None).unwrap();
    let fd = c.create("/f", 0o644).unwrap();
    c.close(fd).unwrap();
    for to in ["/c/d", "/c/e/d", "/c/./e/d", "//c/e/d"] {
        let err = c.rename("/c", to).unwrap_err();
        assert_eq!(err.errno(), libc::EINVAL, "{to}: {err}");
    }
    let err = c.rename("/c", "/c/e").unwrap_err();
    assert_eq!(err.errno(), libc::EINVAL, "onto its own child: {err}");
    assert!(c.stat("/c/e").unwrap().is_dir());
    let names = |c: &mut peakfs::client::Client, dir: &str| {
        let mut n: Vec<_> = c
            .readdir(dir)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&mut c, "/"), [&b"c"[..], b"cd", b"f"]);
    assert_eq!(names(&mut c, "/c"), [&b"e"[..]]);
    // A file below a file: ENOTDIR, as the walk finds it.
    assert_eq!(c.rename("/f", "/f/x").unwrap_err().errno(), libc::ENOTDIR);
    // "/cd" is a sibling of "/c", not below it.
    c.rename("/c", "/cd/c").unwrap();
    assert!(c.stat("/cd/c/e").unwrap().is_dir());
    let long = format!("/{}", "n".repeat(256));
    assert_eq!(
        c.mkdir(&long, 0o755, None).unwrap_err().errno(),
        libc::ENAMETOOLONG
    );
}

#[test]
fn clients_of_a_group_act_as_one_for_open_files_orphans_and_directory_hints() {
    let cl = Cluster::start(2);
    let (mut a, mut b) = (cl.client(), cl.client());
    b.join(&a).unwrap();
    let before = a.statfs().unwrap().inodes_used;
    let fd = a.create("/f", 0o644).unwrap();
    a.write(fd, b"kept while open").unwrap();
    a.fsync(fd).unwrap();
    // Unlinked through the other client of the group: an orphan until the group's last close.
    b.unlink("/f").unwrap();
    assert_eq!(errno(b.stat("/f")), libc::ENOENT);
    assert_eq!(a.pread(fd, 100, 0).unwrap(), b"kept while open");
    assert_eq!(a.statfs().unwrap().inodes_used, before + 1);
    a.close(fd).unwrap();
    assert_eq!(
        a.statfs().unwrap().inodes_used,
        before,
        "freed at the last close"
    );
    // A client with a file open cannot join a group.
    let mut c = cl.client();
    let fd = c.create("/g", 0o644).unwrap();
    assert_eq!(errno(c.join(&a)), libc::EBUSY);
    c.close(fd).unwrap();

    // A hint set through one client holds for files the other makes, though that one knew
    // the directory's old hint.
    let d = a.mkdir("/d", 0o755, None).unwrap();
    assert_eq!(b.stat("/d").unwrap().hint.data, DataDist::Block);
    a.set_hint(d.ino, Some(DataDist::File), None).unwrap();
    let fd = b.create("/d/new", 0o644).unwrap();
    b.close(fd).unwrap();
    assert_eq!(a.stat("/d/new").unwrap().hint.data, DataDist::File);
}

#[test]
fn a_write_through_one_descriptor_drops_what_another_read_ahead() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    let old: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let w = c.create("/f", 0o644).unwrap();
    c.write(w, &old).unwrap();
    c.fsync(w).unwrap();
    let r = c.open("/f", libc::O_RDONLY, 0).unwrap();
    // A first read at 0: a sequential reader, whose next bytes are now read ahead.
    assert_eq!(c.pread(r, 4096, 0).unwrap(), old[..4096]);
    c.pwrite(w, b"new bytes", 500_000).unwrap();
    assert_eq!(c.pread(r, 9, 500_000).unwrap(), b"new bytes");
    assert_eq!(c.pread(r, 4096, 4096).unwrap(), old[4096..8192]);
    // Large writes (the servers' memcpy pool copies them) are seen by the next read too.
    for round in 0..20u32 {
        let new: Vec<u8> = (0..600_000u32).map(|i| (i + round * 7) as u8).collect();
        c.pwrite(w, &new, 0).unwrap();
        assert!(c.pread(r, new.len(), 0).unwrap() == new, "round {round}");
    }
    c.close(w).unwrap();
    c.close(r).unwrap();
}

#[test]
fn an_append_lands_after_what_another_descriptor_wrote() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    let w = c.create("/log", 0o644).unwrap();
    let a = c.open("/log", libc::O_WRONLY | libc::O_APPEND, 0).unwrap();
    c.write(w, b"first ").unwrap();
    c.write(a, b"second").unwrap();
    c.close(a).unwrap();
    c.close(w).unwrap();
    let r = c.open("/log", libc::O_RDONLY, 0).unwrap();
    assert_eq!(c.pread(r, 100, 0).unwrap(), b"first second");
    c.close(r).unwrap();
}

#[test]
fn an_fsync_reaches_every_slice_the_files_writes_reached_through_any_descriptor() {
    let cl = Cluster::start(2);
    let mut c = cl.client();
    let layout = *c.layout();
    let d = c
        .mkdir("/sync", 0o755, Some(dir_of(DataDist::Block)))
        .unwrap();
    assert_eq!(d.hint.data, DataDist::Block);
    let fd = c.create("/sync/f", 0o644).unwrap();
    let ino = c.stat("/sync/f").unwrap().ino;
    let block = u64::from(layout.block_size());
    let route = |o: u64| {
        let r = layout.route(layout.data_lambda(ino, DataDist::Block, o));
        (r.server, r.worker)
    };
    // A block on every slice (4: 2 servers x 2 workers), then closed: committed, not synced.
    let mut slices = std::collections::BTreeSet::new();
    for b in 0..64 {
        if slices.insert(route(b * block)) {
            c.pwrite(fd, b"durable?", b * block).unwrap();
        }
    }
    assert_eq!(slices.len(), layout.slots() as usize);
    c.close(fd).unwrap();
    let fd = c.open("/sync/f", libc::O_RDWR, 0).unwrap();
    let sent = c.rpcs_sent();
    c.fsync(fd).unwrap();
    assert_eq!(
        c.rpcs_sent() - sent,
        slices.len() as u64,
        "an FSYNC to every slice written through the closed descriptor"
    );
    let sent = c.rpcs_sent();
    c.fsync(fd).unwrap();
    assert_eq!(
        c.rpcs_sent() - sent,
        1,
        "nothing new: the home slice's FSYNC"
    );
    // Another open descriptor's writes, not yet committed, to a slice other than home.
    let home = layout.route(peakfs::placement::home_lambda(ino));
    let far = (1..)
        .map(|b| b * block)
        .find(|&o| route(o) != (home.server, home.worker))
        .unwrap();
    let other = c.open("/sync/f", libc::O_WRONLY, 0).unwrap();
    c.pwrite(other, b"other", far).unwrap();
    let sent = c.rpcs_sent();
    c.fsync(fd).unwrap();
    assert_eq!(
        c.rpcs_sent() - sent,
        3,
        "the other descriptor's commit (SETATTR), then an FSYNC to its slice and to home"
    );
    c.close(other).unwrap();
    c.close(fd).unwrap();
}
