//! Real processes over loopback: `peakfs-master` and two `peakfs-server`s as children of the
//! test, driven with raw pRPC requests. A server is killed with SIGKILL in the middle of
//! writes and restarted on the same data file: every write acknowledged before the last
//! completed fsync must be there (WAL recovery), and the file system must stay usable. At the
//! end every process gets SIGTERM and must exit 0. A library client connected before a
//! server restarts at the same address goes on using it.

mod server_support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use peakfs::master::fetch_view;
use peakfs::placement::{DataDist, Hint, ROOT_INO, home_lambda};
use peakfs::protocol::{Errno, Fate, LinkFlags, Reply, Request, SetAttr, UnlinkFlags, op};
use server_support::{Client, REG, assert_bytes, block_file, pattern};

/// A child process killed on drop.
struct Proc {
    child: Child,
    addr: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin` with `args` and waits for its "... listening on ADDR" line.
fn spawn(bin: &str, args: &[&str], log: &Path) -> Proc {
    let mut child = Command::new(bin)
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        addr.contains(':'),
        "{bin} did not start: {line:?}; log: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    Proc { child, addr }
}

/// A master for 2 servers, logging to `dir`/master.log.
fn master(dir: &Path) -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_peakfs-master"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--servers",
            "2",
            "--report-interval-ms",
            "100",
        ],
        &dir.join("master.log"),
    )
}

fn server(master: &str, data: &Path, log: &Path) -> Proc {
    server_at(master, "127.0.0.1:0", data, log)
}

/// A master, two servers and a client of the library, with their data and logs in `dir`.
fn two_servers_and_a_client(dir: &Path) -> (Proc, [Proc; 2], peakfs::client::Client) {
    let master = master(dir);
    let servers = [
        server(&master.addr, &dir.join("s0.data"), &dir.join("s0.log")),
        server(&master.addr, &dir.join("s1.data"), &dir.join("s1.log")),
    ];
    let options = peakfs::client::ClientOptions {
        timeout: Duration::from_secs(5),
        ready_wait: Duration::from_secs(15),
        ..Default::default()
    };
    let c = peakfs::client::Client::connect(&master.addr, options).unwrap();
    (master, servers, c)
}

/// A server listening on `listen`.
fn server_at(master: &str, listen: &str, data: &Path, log: &Path) -> Proc {
    spawn(
        env!("CARGO_BIN_EXE_peakfs-server"),
        &[
            "--master",
            master,
            "--listen",
            listen,
            "--data",
            data.to_str().unwrap(),
            "--data-size",
            &(64u64 << 20).to_string(),
            "--workers",
            "2",
            "--no-pin",
        ],
        log,
    )
}

fn sigterm_exits_zero(mut p: Proc) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(p.child.id() as i32, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            return;
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Appends `chunk`-byte writes round-robin to `files`; every `commit_every` writes it fsyncs
/// every slice and records how many writes are now durable. Stops at the first error.
fn writer(
    cl: &mut Client,
    files: &[peakfs::protocol::Attr],
    chunk: usize,
    commit_every: usize,
    stop_after: Option<usize>,
) -> usize {
    let mut committed = 0;
    let mut i = 0;
    loop {
        if stop_after.is_some_and(|n| i >= n) {
            return committed;
        }
        let f = &files[i % files.len()];
        let off = (i / files.len() * chunk) as u64;
        let data = pattern(i as u64, chunk);
        let pieces = cl.layout.split(f.ino, f.hint.data, off, chunk as u64);
        for p in pieces {
            let at = (p.offset - off) as usize;
            let req = Request::Write {
                ino: f.ino,
                offset: p.offset,
                extent: (f.hint.data == DataDist::Io).then_some(p.offset),
                dist: f.hint.data,
                drop_set_id: false,
                data: &data[at..at + p.len as usize],
            };
            if cl.try_call(p.lambda, req).is_err() {
                return committed;
            }
        }
        let set = peakfs::protocol::SetAttr {
            extend_to: Some(off + chunk as u64),
            layout: Some(f.hint.data),
            ..Default::default()
        };
        if cl
            .try_call(
                peakfs::placement::home_lambda(f.ino),
                Request::SetAttr { ino: f.ino, set },
            )
            .is_err()
        {
            return committed;
        }
        i += 1;
        if i % commit_every == 0 {
            for l in 0..u64::from(cl.layout.slots()) {
                if cl.try_call(l, Request::Fsync { ino: 0 }).is_err() {
                    return committed;
                }
            }
            committed = i;
        }
    }
}

#[test]
fn kill_9_during_writes_loses_nothing_fsynced_and_sigterm_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let master = master(d);
    let s0 = server(&master.addr, &d.join("s0.data"), &d.join("s0.log"));
    let s1 = server(&master.addr, &d.join("s1.data"), &d.join("s1.log"));
    let uri = format!("http://{}", master.addr);
    let view = fetch_view(&uri, Duration::from_secs(10)).unwrap();
    let mut cl = Client::connect(&view);
    let root = cl.getattr(ROOT_INO).unwrap();
    let files: Vec<_> = (0..6)
        .map(|i| {
            cl.create(&root, &format!("ckpt.{i}"), REG, block_file())
                .unwrap()
        })
        .collect();
    let chunk = 20_000;
    let per_commit = 6;

    // Write in the background; kill server 1 (SIGKILL) while writes are in flight.
    let (committed, s1) = std::thread::scope(|sc| {
        let w = sc.spawn(|| writer(&mut cl, &files, chunk, per_commit, None));
        std::thread::sleep(Duration::from_millis(1500));
        let mut s1 = s1;
        s1.child.kill().unwrap();
        s1.child.wait().unwrap();
        (w.join().unwrap(), s1)
    });
    drop(s1);
    assert!(
        committed >= 2 * per_commit,
        "too few commits before the kill: {committed}"
    );

    // Restart on the same data file (new port; the master hands back the stored index once
    // the dead server's lease ran out).
    std::thread::sleep(Duration::from_millis(500));
    let s1 = server(&master.addr, &d.join("s1.data"), &d.join("s1-restart.log"));
    let log = std::fs::read_to_string(d.join("s1-restart.log")).unwrap();
    assert!(
        log.contains("recovered=true"),
        "restart did not recover: {log}"
    );
    let view = fetch_view(&uri, Duration::from_secs(10)).unwrap();
    let mut cl = Client::connect(&view);
    let root = cl.getattr(ROOT_INO).unwrap();

    // Every fsynced write is there, byte for byte.
    let mut names = cl.readdir(&root);
    names.sort();
    assert_eq!(
        names,
        (0..6).map(|i| format!("ckpt.{i}")).collect::<Vec<_>>()
    );
    for i in 0..committed {
        let f = &files[i % files.len()];
        let off = (i / files.len() * chunk) as u64;
        let got = cl.read(f, off, chunk as u64);
        assert_bytes(
            &got,
            &pattern(i as u64, chunk),
            &format!("write {i} of {committed} fsynced"),
        );
    }
    // And the file system keeps working: new files, more writes, fsync.
    let extra = cl.create(&root, "after.crash", REG, block_file()).unwrap();
    cl.write(&extra, 0, &pattern(99, 150_000), true);
    assert_bytes(
        &cl.read(&extra, 0, 150_000),
        &pattern(99, 150_000),
        "post-crash file",
    );
    assert_eq!(
        cl.create(&root, "ckpt.0", REG, Hint::default())
            .unwrap_err(),
        Errno::EEXIST
    );
    cl.close();

    sigterm_exits_zero(s0);
    sigterm_exits_zero(s1);
    sigterm_exits_zero(master);
}

#[test]
fn link_counts_io_units_and_hints_survive_kill_9_and_an_orphan_whose_client_is_gone_is_freed_at_restart()
 {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let master = master(d);
    let mut procs = vec![
        server(&master.addr, &d.join("s0.data"), &d.join("s0.log")),
        server(&master.addr, &d.join("s1.data"), &d.join("s1.log")),
    ];
    let uri = format!("http://{}", master.addr);
    let view = fetch_view(&uri, Duration::from_secs(10)).unwrap();
    let mut cl = Client::connect(&view);
    let root = cl.getattr(ROOT_INO).unwrap();
    assert!(
        root.hint.bigdir,
        "the master's default: entries hashed over the slices"
    );
    let layout = cl.layout;
    let slice_of = |name: &str| layout.route(layout.dentry_lambda(ROOT_INO, true, name.as_bytes()));
    let f = cl.create(&root, "linked", REG, block_file()).unwrap();
    let home = layout.route(home_lambda(f.ino));
    // Names on the file's slice (LINK raises the count) and on another (SETATTR first).
    let names: Vec<String> = (0..500).map(|i| format!("link.{i}")).collect();
    let here = names.iter().find(|n| slice_of(n) == home).unwrap();
    let away = names.iter().find(|n| slice_of(n) != home).unwrap();
    fn link(ino: u64, name: &str, new_link: bool) -> Request<'_> {
        Request::Link {
            pino: ROOT_INO,
            ino,
            mode: REG,
            flags: LinkFlags {
                new_link,
                ..LinkFlags::default()
            },
            name: name.as_bytes(),
        }
    }
    cl.call(
        layout.dentry_lambda(ROOT_INO, true, here.as_bytes()),
        link(f.ino, here, true),
    )
    .unwrap();
    let set = SetAttr {
        nlink_delta: Some(1),
        ..SetAttr::default()
    };
    cl.call(home_lambda(f.ino), Request::SetAttr { ino: f.ino, set })
        .unwrap();
    cl.call(
        layout.dentry_lambda(ROOT_INO, true, away.as_bytes()),
        link(f.ino, away, false),
    )
    .unwrap();
    assert_eq!(cl.getattr(f.ino).unwrap().nlink, 3);

    // A client unlinks a file it holds open, then is gone: the inode is an orphan.
    let open_name = names
        .iter()
        .rev()
        .find(|n| slice_of(n).server == home.server)
        .unwrap();
    let o = cl.create(&root, open_name, REG, block_file()).unwrap();
    cl.write(&o, 0, &pattern(5, 100_000), false);
    let unlink = Request::Unlink {
        pino: ROOT_INO,
        flags: UnlinkFlags {
            orphan: true,
            ..UnlinkFlags::default()
        },
        name: open_name.as_bytes(),
    };
    let l = layout.dentry_lambda(ROOT_INO, true, open_name.as_bytes());
    let r = cl.call(l, unlink).unwrap();
    let Reply::Removed(Some(r)) = Reply::decode(op::UNLINK, &r).unwrap() else {
        panic!("no removal")
    };
    assert_eq!((r.ino, r.fate), (o.ino, Fate::Orphan));
    assert_eq!(cl.getattr(o.ino).unwrap().nlink, 0, "kept without links");
    for l in 0..u64::from(layout.slots()) {
        cl.call(l, Request::Fsync { ino: 0 }).unwrap();
    }
    // An I/O unit is durable once answered, with no FSYNC after it: writers lay data out by it.
    let unit = Request::IoUnit {
        ino: f.ino,
        unit: 47_008,
    };
    let r = cl.call(home_lambda(f.ino), unit).unwrap();
    let Reply::Attr(a) = Reply::decode(op::IO_UNIT, &r).unwrap() else {
        panic!("no attributes")
    };
    assert_eq!(a.io_unit, 47_008);
    // So is a placement hint: an empty file on the same slice becomes I/O-based.
    let hinted_name = (0..500)
        .map(|i| format!("hinted.{i}"))
        .find(|n| slice_of(n) == home)
        .unwrap();
    let h = cl.create(&root, &hinted_name, REG, block_file()).unwrap();
    let set = Request::SetHint {
        ino: h.ino,
        data: Some(DataDist::Io),
        io_unit: None,
    };
    cl.call(home_lambda(h.ino), set).unwrap();
    cl.close();

    // SIGKILL the server holding the three inodes and restart it on its data file.
    let victim = view
        .servers
        .iter()
        .find(|s| s.index == home.server)
        .map(|s| s.data_addr.clone())
        .unwrap();
    let k = procs.iter().position(|p| p.addr == victim).unwrap();
    let mut p = procs.remove(k);
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    drop(p);
    std::thread::sleep(Duration::from_millis(500));
    let data = d.join(format!("s{k}.data"));
    procs.push(server(&master.addr, &data, &d.join("restart.log")));
    let log = std::fs::read_to_string(d.join("restart.log")).unwrap();
    assert!(log.contains("recovered=true"), "{log}");
    assert!(
        log.contains("orphans=1"),
        "the restart frees the orphan: {log}"
    );

    let view = fetch_view(&uri, Duration::from_secs(10)).unwrap();
    let mut cl = Client::connect(&view);
    let a = cl.getattr(f.ino).unwrap();
    assert_eq!(a.nlink, 3, "the WAL replay keeps the count");
    assert_eq!(a.io_unit, 47_008, "the WAL replay keeps the I/O unit");
    let hint = cl.getattr(h.ino).unwrap().hint;
    assert_eq!(hint.data, DataDist::Io, "the WAL replay keeps the hint");
    assert_eq!(cl.getattr(o.ino), Err(Errno::ENOENT));
    let root = cl.getattr(ROOT_INO).unwrap();
    let mut want = vec![
        "linked".to_string(),
        here.clone(),
        away.clone(),
        hinted_name.clone(),
    ];
    want.sort();
    assert_eq!(cl.readdir(&root), want);
    cl.close();
    for p in procs {
        sigterm_exits_zero(p);
    }
    sigterm_exits_zero(master);
}

/// A server killed and restarted at the same address takes a connected client's next request:
/// the client sees that the server closed its idle connection and connects again, instead of
/// losing the request (EIO) on the dead connection.
#[test]
fn a_client_s_first_request_after_a_server_restarts_at_its_address_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (master, [s0, s1], mut c) = two_servers_and_a_client(d);
    // STATFS asks every slice, so every connection is in use.
    c.statfs().unwrap();
    let fd = c.create("/before", 0o644).unwrap();
    c.pwrite(fd, b"fsynced", 0).unwrap();
    c.fsync(fd).unwrap();
    c.close(fd).unwrap();

    let address = s1.addr.clone();
    drop(s1); // SIGKILL
    let s1 = server_at(
        &master.addr,
        &address,
        &d.join("s1.data"),
        &d.join("s1-restart.log"),
    );
    assert_eq!(s1.addr, address);
    // Idle longer than the client's check interval (100 ms), as a client is while a server
    // restarts.
    std::thread::sleep(Duration::from_millis(150));
    c.statfs().expect("the first request after the restart");
    let fd = c.open("/before", libc::O_RDONLY, 0).unwrap();
    assert_eq!(c.pread(fd, 100, 0).unwrap(), b"fsynced");
    c.close(fd).unwrap();
    drop(c);

    sigterm_exits_zero(s0);
    sigterm_exits_zero(s1);
    sigterm_exits_zero(master);
}

/// Commit consistency (§III-D) after a crash: every write a close acknowledged comes back
/// after both servers are killed with SIGKILL and restarted, with no fsync of a file. A
/// server hands what a close acknowledges to the device before it answers (the page cache
/// keeps it when the process dies), and a restart on the same boot replays it. So do the
/// entries of a directory after an fsync of it, and the inode of a subdirectory, which lies
/// on another slice than its entry (MKINODE is written through).
#[test]
fn every_write_a_close_acknowledged_and_every_entry_of_an_fsynced_directory_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (master, servers, mut c) = two_servers_and_a_client(d);
    // Two blocks of 64 KiB and a bit (on the inode's slice and on another), a small file, and
    // files changed after their first close: overwritten in the middle, truncated.
    let content = |i: usize, len: usize| -> Vec<u8> {
        (0..len).map(|k| (k * 7 + i * 13 % 251) as u8).collect()
    };
    let files = 24;
    let mut expected = Vec::new();
    for i in 0..files {
        let len = if i % 4 == 3 { 3901 } else { 100_000 };
        let mut want = content(i, len);
        let fd = c.create(&format!("/closed.{i}"), 0o644).unwrap();
        c.pwrite(fd, &want, 0).unwrap();
        c.close(fd).unwrap();
        if i % 4 == 1 {
            let fd = c.open(&format!("/closed.{i}"), libc::O_WRONLY, 0).unwrap();
            c.pwrite(fd, b"changed after its first close", 70_000)
                .unwrap();
            c.close(fd).unwrap();
            want[70_000..70_029].copy_from_slice(b"changed after its first close");
        }
        if i % 4 == 2 {
            c.truncate(&format!("/closed.{i}"), 5000).unwrap();
            want.truncate(5000);
        }
        expected.push(want);
    }
    // A plain directory (the root is a bigdir), whose entries lie on another slice than this
    // client's, where its subdirectories' inodes go.
    let layout = *c.layout();
    let plain = Hint {
        data: DataDist::Block,
        bigdir: false,
    };
    let plain_dir = (0..)
        .map(|k| format!("/d{k}"))
        .find(|d| {
            let a = c.mkdir(d, 0o755, Some(plain)).unwrap();
            layout.route(home_lambda(a.ino)) != layout.route(c.home())
        })
        .unwrap();
    c.mkdir(&format!("{plain_dir}/sub"), 0o755, None).unwrap();
    let mut names: Vec<Vec<u8>> = (0..8).map(|k| format!("empty.{k}").into_bytes()).collect();
    for name in &names {
        let fd = c
            .create(
                &format!("{plain_dir}/{}", String::from_utf8_lossy(name)),
                0o644,
            )
            .unwrap();
        c.close(fd).unwrap();
    }
    names.push(b"sub".to_vec());
    names.sort();
    c.fsync_dir(&plain_dir).unwrap();

    let addresses: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    drop(servers); // SIGKILL
    let servers: Vec<Proc> = addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let data = d.join(format!("s{i}.data"));
            server_at(&master.addr, a, &data, &d.join(format!("s{i}-restart.log")))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(150));
    for (i, want) in expected.iter().enumerate() {
        let fd = c.open(&format!("/closed.{i}"), libc::O_RDONLY, 0).unwrap();
        let got = c.pread(fd, 200_000, 0).unwrap();
        assert_eq!(got.len(), want.len(), "file {i}'s size");
        assert!(got == *want, "file {i}'s bytes");
        c.close(fd).unwrap();
    }
    let mut found: Vec<Vec<u8>> = c
        .readdir(&plain_dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    found.retain(|n| n != b"." && n != b"..");
    found.sort();
    assert_eq!(found, names);
    assert!(c.stat(&format!("{plain_dir}/sub")).unwrap().is_dir());
    drop(c);
    for s in servers {
        sigterm_exits_zero(s);
    }
    sigterm_exits_zero(master);
}

/// A server restarted at another address is found through the master: the client cannot
/// connect to the address it had, asks the master where that server is now, and goes on.
/// The restarted server waits for the master to free its index (its old address missed its
/// reports) before it takes it.
#[test]
fn a_client_finds_a_server_restarted_at_another_address_through_the_master() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (master, [s0, s1], mut c) = two_servers_and_a_client(d);
    c.statfs().unwrap();
    let fd = c.create("/before", 0o644).unwrap();
    c.pwrite(fd, b"closed", 0).unwrap();
    c.close(fd).unwrap();

    let old = s1.addr.clone();
    drop(s1); // SIGKILL
    let s1 = server(&master.addr, &d.join("s1.data"), &d.join("s1-moved.log"));
    assert_ne!(s1.addr, old);
    // Its address reached the master before it printed it; requests that were on their way
    // to the dead server may fail, the next ones not.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = c.statfs() {
        assert!(
            Instant::now() < deadline,
            "never found the moved server: {e}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let fd = c.open("/before", libc::O_RDONLY, 0).unwrap();
    assert_eq!(c.pread(fd, 100, 0).unwrap(), b"closed");
    c.close(fd).unwrap();
    drop(c);

    sigterm_exits_zero(s0);
    sigterm_exits_zero(s1);
    sigterm_exits_zero(master);
}

/// A server whose data cannot hold its zones (too small when empty, formatted for another
/// worker count) exits with the reason before it registers, so the master keeps the index for
/// a server that can start: here the cluster's both indexes, after two refused starts.
#[test]
fn a_server_that_cannot_use_its_data_exits_before_it_takes_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let master = master(dir.path());
    let refused = |args: &[&str], data: &Path, want: &str| {
        refused_start(&master.addr, data, args, want);
    };
    // Two 4 MiB zones and the superblock need 8,392,704 bytes.
    let small = dir.path().join("small.data");
    refused(
        &["--data-size", "8388608", "--workers", "2"],
        &small,
        "give it at least 8392704 bytes",
    );
    // s0.data formatted for 2 workers, then offered to a server of 4 (after its own server
    // stopped, so that its index is free for it).
    let s0 = dir.path().join("s0.data");
    sigterm_exits_zero(server(&master.addr, &s0, &dir.path().join("s0.log")));
    refused(&["--workers", "4"], &s0, "workers");
    let _servers = both_indexes_taken(&master.addr, dir.path(), &s0);
}

/// Runs a server on `data` with more `args`, which must fail saying `want`.
fn refused_start(master: &str, data: &Path, args: &[&str], want: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_peakfs-server"))
        .args(["--master", master, "--listen", "127.0.0.1:0", "--no-pin"])
        .args(["--data", data.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(want), "{stderr}");
}

/// Starts a server on `s0` and one on a new `s1.data` in `dir`, and checks that both got an
/// index of the master's two.
fn both_indexes_taken(master: &str, dir: &Path, s0: &Path) -> [Proc; 2] {
    let servers = [
        server(master, s0, &dir.join("s0b.log")),
        server(master, &dir.join("s1.data"), &dir.join("s1.log")),
    ];
    let view = fetch_view(&format!("http://{master}"), Duration::from_secs(15)).unwrap();
    assert_eq!(view.servers.len(), 2);
    servers
}

/// Unmounts a test's tmpfs when dropped.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_new_server_whose_format_fails_gives_its_index_back() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: mounting a full tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    // 16 KiB: the sparse data file is created, but the format's writes find no space after
    // the server registered.
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
        .arg(&full)
        .status()
        .unwrap();
    assert!(mounted.success());
    let guard = Mounted(full.clone());
    let master = master(dir.path());
    refused_start(
        &master.addr,
        &full.join("x.data"),
        &["--data-size", &(64u64 << 20).to_string(), "--workers", "2"],
        "write failed with NVMe status Capacity Exceeded",
    );
    drop(guard);
    // Both indexes are free for the cluster's two servers, at addresses of their own.
    let _servers = both_indexes_taken(&master.addr, dir.path(), &dir.path().join("s0.data"));
}
