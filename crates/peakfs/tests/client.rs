//! The client library against a real cluster (master + 2 servers as child processes):
//! namespace operations, the write pipeline, commit consistency between clients, and
//! timeouts against a dead server.

mod client_support;

use std::time::{Duration, Instant};

use client_support::Cluster;
use peakfs::client::ClientError;
use peakfs::placement::{DataDist, Hint};
use peakfs::protocol::Errno;

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
        c.mkdir(
            &dir,
            0o755,
            Some(Hint {
                data: dist,
                bigdir: false,
            }),
        )
        .unwrap();
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
            // I/O-distributed data is read with the offsets it was written with.
            let got = c.pread(fd, chunk, k * chunk as u64).unwrap();
            assert!(got == pattern(k, chunk), "{dist:?} chunk {k} differs");
        }
        c.close(fd).unwrap();
        if dist != DataDist::Io {
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
        }
        c.unlink(&path).unwrap();
    }
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
