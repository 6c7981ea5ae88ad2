//! FileController against the real file: what the controller writes is in the file, what the
//! file holds is what the controller reads, and bad namespaces fail at attach.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::Duration;

use gpu_nvme::controller::{
    Controller, ControllerError, FileBackend, FileController, FileControllerConfig,
};
use gpu_nvme::device::{DeviceConfig, NvmeDevice};

fn config(path: &std::path::Path, backend: FileBackend) -> FileControllerConfig {
    let mut c = FileControllerConfig::new(path);
    c.backend = backend;
    c.max_io_queues = 8;
    c
}

/// A 1 MiB temporary file of pseudo-random bytes, and its bytes.
fn seeded_file() -> (tempfile::NamedTempFile, Vec<u8>) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let seed: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    file.write_all(&seed).unwrap();
    file.flush().unwrap();
    (file, seed)
}

/// The config of a controller of `workers` workers on `file` that sleep on their bells after
/// 100 idle rounds.
fn quick_sleeper_config(
    file: &std::path::Path,
    backend: FileBackend,
    workers: usize,
) -> FileControllerConfig {
    let mut c = config(file, backend);
    c.workers = workers;
    c.idle = gpu_nvme::controller::threads::IdleBackoff {
        spins: 100,
        yields: 0,
    };
    c
}

/// [`quick_sleeper_config`]'s controller with psync.
fn quick_sleeper(file: &std::path::Path, workers: usize) -> Arc<FileController> {
    FileController::new(quick_sleeper_config(file, FileBackend::Psync, workers)).unwrap()
}

/// A device over `fc` with one I/O queue, SQ 1.
fn one_queue_device(fc: &Arc<FileController>) -> NvmeDevice {
    let one = DeviceConfig {
        io_queues: 1,
        ..DeviceConfig::default()
    };
    NvmeDevice::open(fc.clone(), one).unwrap()
}

/// Asserts that `bell`, asleep through `took` of others' commands, slept again only at its
/// 50 ms limit (a few times), not once per command: nothing rang it. `slept_before` is its
/// count of sleeps when they began.
fn assert_never_woken(bell: &common::bell::Bell, slept_before: u64, took: Duration, what: &str) {
    let slept = bell.sleeps() - slept_before;
    let limit = 4 + 2 * took.as_millis() / 50;
    assert!(
        u128::from(slept) <= limit,
        "{what}: slept {slept} times in {took:?}"
    );
}

/// Waits until `bell` has had more than `since` sleeps.
fn wait_for_a_sleep(bell: &common::bell::Bell, since: u64) {
    let t = std::time::Instant::now();
    while bell.sleeps() == since {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "nothing slept on the bell"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn writes_land_in_the_file_and_file_contents_are_read() {
    for backend in [FileBackend::Uring, FileBackend::Psync, FileBackend::Mmap] {
        let (file, mut seed) = seeded_file();
        let ctrl: Arc<dyn Controller> = FileController::new(config(file.path(), backend)).unwrap();
        let dev = NvmeDevice::open(ctrl, DeviceConfig::default()).unwrap();
        // What the file holds is what a read returns.
        let mut back = vec![0u8; 300 << 10];
        dev.read_blocks(17, &mut back).unwrap();
        assert!(
            back == seed[17 * 4096..17 * 4096 + back.len()],
            "{backend:?}: read differs from the file"
        );
        // What a write sends is what the file holds after a flush.
        let data: Vec<u8> = (0..12 * 4096).map(|i| (i % 251) as u8).collect();
        dev.write_blocks(200, &data).unwrap();
        dev.flush().unwrap();
        seed[200 * 4096..200 * 4096 + data.len()].copy_from_slice(&data);
        let mut on_disk = Vec::new();
        let mut f = std::fs::File::open(file.path()).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut on_disk).unwrap();
        assert!(
            on_disk == seed,
            "{backend:?}: file contents differ after write + flush"
        );
    }
}

#[test]
fn direct_io_reads_and_writes_through_aligned_bounce_buffers() {
    // tmpfs refuses O_DIRECT; use the target directory, which is on a real file system.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("ns.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let mut c = config(&path, FileBackend::Psync);
    c.direct = true;
    let ctrl = match FileController::new(c) {
        Ok(c) => c,
        Err(e) => {
            println!("skipped: O_DIRECT unavailable here: {e}");
            return;
        }
    };
    let dev = NvmeDevice::open(ctrl, DeviceConfig::default()).unwrap();
    let data: Vec<u8> = (0..8 * 4096).map(|i| (i % 13) as u8).collect();
    dev.write_blocks(3, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    dev.read_blocks(3, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn a_missing_namespace_file_is_a_clear_error() {
    let err = FileController::new(FileControllerConfig::new("/nonexistent/ns.img")).unwrap_err();
    assert!(matches!(err, ControllerError::Namespace { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/ns.img"), "{err}");
}

#[test]
fn a_namespace_file_too_small_for_the_capacity_is_a_clear_error() {
    let file = tempfile::NamedTempFile::new().unwrap();
    file.as_file().set_len(10 * 4096).unwrap();
    let mut c = config(file.path(), FileBackend::Psync);
    c.capacity_blocks = Some(11);
    let err = FileController::new(c).unwrap_err();
    assert!(err.to_string().contains("10 blocks"), "{err}");
    // An empty file holds no block at all.
    let empty = tempfile::NamedTempFile::new().unwrap();
    assert!(FileController::new(config(empty.path(), FileBackend::Psync)).is_err());
}

#[test]
fn bad_configurations_are_refused() {
    let file = tempfile::NamedTempFile::new().unwrap();
    file.as_file().set_len(1 << 20).unwrap();
    let mut c = config(file.path(), FileBackend::Psync);
    c.lba_size = 1000;
    assert!(FileController::new(c).is_err(), "LBA size 1000");
    let mut c = config(file.path(), FileBackend::Psync);
    c.workers = 0;
    assert!(FileController::new(c).is_err(), "no workers");
    let c = config(file.path(), FileBackend::Psync);
    let ctrl = FileController::new(c).unwrap();
    let too_many = DeviceConfig {
        io_queues: 8,
        ..DeviceConfig::default()
    };
    assert!(
        NvmeDevice::open(ctrl, too_many).is_err(),
        "more host queues than the controller has"
    );
}

#[test]
fn null_mode_completes_commands_without_touching_data() {
    let file = tempfile::NamedTempFile::new().unwrap();
    file.as_file().set_len(1 << 20).unwrap();
    let mut c = config(file.path(), FileBackend::Psync);
    c.null_data = true;
    let dev = NvmeDevice::open(FileController::new(c).unwrap(), DeviceConfig::default()).unwrap();
    dev.write_blocks(0, &vec![0xffu8; 8192]).unwrap();
    let mut back = vec![7u8; 8192];
    dev.read_blocks(0, &mut back).unwrap();
    let mut on_disk = Vec::new();
    std::fs::File::open(file.path())
        .unwrap()
        .read_to_end(&mut on_disk)
        .unwrap();
    assert!(
        on_disk.iter().all(|&b| b == 0),
        "null mode must not write the file"
    );
    let stats = dev.controller().stats();
    assert!(stats.commands >= 2, "{stats:?}");
}

#[test]
fn direct_reads_land_in_the_callers_buffer_once_pass_through_is_on() {
    for backend in [FileBackend::Uring, FileBackend::Psync, FileBackend::Mmap] {
        let (file, seed) = seeded_file();
        let ctrl: Arc<dyn Controller> = FileController::new(config(file.path(), backend)).unwrap();
        let dev = NvmeDevice::open(ctrl, DeviceConfig::default()).unwrap();
        let block = dev.geometry().block_size() as usize;
        let q = dev.host_queue(0).unwrap();
        let mut buf = vec![0u8; 8 + (600 << 10)];
        assert!(
            q.read_direct(3, &mut buf[..block]).is_err(),
            "{backend:?}: refused before enable_direct_host_dma"
        );
        dev.enable_direct_host_dma();
        // One block, a piece over two pages, and one that needs a PRP list; a dword offset
        // into the vector so the pieces start inside a page.
        for (lba, len) in [(3u64, block), (40, 2 * block), (5, 600 << 10)] {
            let len = len / block * block;
            let dst = &mut buf[4..4 + len];
            dst.fill(0xAA);
            q.read_direct(lba, dst).unwrap();
            let at = lba as usize * block;
            assert!(
                *dst == seed[at..at + len],
                "{backend:?}: {len} bytes at block {lba}"
            );
        }
        assert!(
            q.read_direct(3, &mut buf[1..1 + block]).is_err(),
            "{backend:?}: a buffer that is not dword aligned"
        );
        assert!(q.read_direct(3, &mut buf[..7]).is_err(), "not whole blocks");
    }
}

#[test]
fn many_direct_reads_on_one_queue_or_spread_over_all_land_in_their_buffers() {
    let (file, seed) = seeded_file();
    let mut c = config(file.path(), FileBackend::Psync);
    c.workers = 2;
    let ctrl: Arc<dyn Controller> = FileController::new(c).unwrap();
    let dev = NvmeDevice::open(
        ctrl,
        DeviceConfig {
            io_queues: 2,
            queue_depth: 8,
            ..DeviceConfig::default()
        },
    )
    .unwrap();
    dev.enable_direct_host_dma();
    let block = dev.geometry().block_size() as usize;
    let blocks = seed.len() / block;
    // More requests than both queues' windows (4 each), mixed sizes, out of order.
    let wanted: Vec<(u64, usize)> = (0..40)
        .map(|i| (((i * 37) % (blocks - 3)) as u64, 1 + i % 3))
        .collect();
    for spread in [false, true] {
        let mut bufs: Vec<Vec<u8>> = wanted.iter().map(|&(_, n)| vec![0xAA; n * block]).collect();
        let mut reqs: Vec<(u64, &mut [u8])> = wanted
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(lba, _), b)| (lba, b.as_mut_slice()))
            .collect();
        if spread {
            dev.read_direct_spread(&mut reqs).unwrap();
        } else {
            dev.host_queue(1)
                .unwrap()
                .read_direct_many(&mut reqs)
                .unwrap();
        }
        for (&(lba, n), b) in wanted.iter().zip(&bufs) {
            let at = lba as usize * block;
            assert!(
                *b == seed[at..at + n * block],
                "spread {spread}: {n} blocks at {lba}"
            );
        }
        // One bad buffer refuses the whole batch before anything is sent.
        let mut odd = vec![0u8; block + 1];
        let mut bad = vec![(0u64, &mut odd[1..])];
        let refused = if spread {
            dev.read_direct_spread(&mut bad)
        } else {
            dev.host_queue(0).unwrap().read_direct_many(&mut bad)
        };
        assert!(refused.is_err(), "spread {spread}: unaligned buffer");
    }
    let stats = dev.controller().stats();
    assert!(stats.commands >= 80, "{stats:?}");
}

#[test]
fn direct_writes_take_their_data_from_the_callers_buffers() {
    for backend in [FileBackend::Uring, FileBackend::Psync, FileBackend::Mmap] {
        let (file, _seed) = seeded_file();
        let ctrl: Arc<dyn Controller> = FileController::new(config(file.path(), backend)).unwrap();
        let dev = NvmeDevice::open(
            ctrl,
            DeviceConfig {
                queue_depth: 8,
                ..DeviceConfig::default()
            },
        )
        .unwrap();
        let block = dev.geometry().block_size() as usize;
        let q = dev.host_queue(0).unwrap();
        let data: Vec<u8> = (0..8 + (600 << 10)).map(|i| (i % 253) as u8).collect();
        assert!(
            q.write_direct_many(&[(3, &data[..block])]).is_err(),
            "{backend:?}: refused before enable_direct_host_dma"
        );
        dev.enable_direct_host_dma();
        // More requests than the window (4), side by side in the 1 MiB file: one block, two,
        // and 300 KiB (a PRP list), each from a dword offset inside a page.
        let mut lba = 2u64;
        let pieces: Vec<(u64, std::ops::Range<usize>)> = (0..6)
            .map(|i| {
                let len = [block, 2 * block, (300 << 10) / block * block][i % 3];
                let at = (lba, 4 * (i + 1)..4 * (i + 1) + len);
                lba += (len / block) as u64 + 1;
                at
            })
            .collect();
        let reqs: Vec<(u64, &[u8])> = pieces
            .iter()
            .map(|(lba, r)| (*lba, &data[r.clone()]))
            .collect();
        q.write_direct_many(&reqs).unwrap();
        for (lba, r) in &pieces {
            let mut back = vec![0u8; r.len()];
            dev.read_blocks(*lba, &mut back).unwrap();
            assert!(
                back == data[r.clone()],
                "{backend:?}: {} bytes at block {lba}",
                r.len()
            );
        }
        assert!(
            q.write_direct_many(&[(3, &data[1..1 + block])]).is_err(),
            "{backend:?}: a buffer that is not dword aligned"
        );
    }
}

#[test]
fn a_flush_through_a_host_queue_completes_there_and_moves_no_data() {
    let (file, _) = seeded_file();
    let ctrl: Arc<dyn Controller> =
        FileController::new(config(file.path(), FileBackend::Uring)).unwrap();
    let dev = NvmeDevice::open(ctrl, DeviceConfig::default()).unwrap();
    let q = dev.host_queue(1).unwrap();
    let before = dev.controller().stats();
    let t = q.submit_flush().unwrap();
    let cqe = q.wait(t, std::time::Duration::from_secs(10)).unwrap();
    q.release(t);
    assert!(cqe.status().is_success(), "{:?}", cqe.status());
    q.flush().unwrap();
    let after = dev.controller().stats();
    assert_eq!(after.commands - before.commands, 2, "{after:?}");
    assert_eq!(
        (after.writes, after.reads, after.errors),
        (before.writes, before.reads, 0)
    );
}

#[test]
fn an_idle_worker_sleeps_on_the_bell_and_a_doorbell_write_wakes_it_at_once() {
    use std::time::{Duration, Instant};

    let (file, seed) = seeded_file();
    let fc = quick_sleeper(file.path(), 1);
    let dev = NvmeDevice::open(fc.clone(), DeviceConfig::default()).unwrap();
    let bell = fc.registers().io_bell(0);
    wait_for_a_sleep(bell, 0);
    // Idle, it sleeps whole: a few sleeps of its 50 ms limit in 300 ms, not thousands of
    // short ones.
    let before = bell.sleeps();
    std::thread::sleep(Duration::from_millis(300));
    let slept = bell.sleeps() - before;
    assert!(slept <= 12, "{slept} sleeps in 300 ms of idleness");
    // A read while it sleeps is served at once: the doorbell write rang the bell. Without the
    // ring it would wait out the sleep (half its 50 ms limit on average).
    let mut waits = Vec::new();
    let mut block = vec![0u8; 4096];
    for i in 0..20u64 {
        wait_for_a_sleep(bell, bell.sleeps());
        let t = Instant::now();
        dev.read_blocks(i, &mut block).unwrap();
        waits.push(t.elapsed());
        let at = i as usize * 4096;
        assert!(block == seed[at..at + 4096], "block {i} differs");
    }
    waits.sort();
    assert!(
        waits[waits.len() / 2] < Duration::from_millis(10),
        "reads waited for the sleep to end: {waits:?}"
    );
}

#[test]
fn the_admin_thread_sleeps_on_its_bell_and_each_admin_command_wakes_it() {
    use std::time::{Duration, Instant};

    let (file, _) = seeded_file();
    let mut c = config(file.path(), FileBackend::Psync);
    c.max_io_queues = 17;
    let fc = FileController::new(c).unwrap();
    let admin_bell = fc.registers().bell(0).clone();
    // Opening creates 16 I/O queue pairs (a CQ and an SQ each, after identify and the queue
    // count); dropping deletes them: about 70 admin commands, each sent after the last one
    // completed, so the admin thread is idle, and asleep, between them. Unwoken, each would
    // wait out part of its 50 ms sleep: seconds in all.
    let t = Instant::now();
    let dev = NvmeDevice::open(
        fc.clone(),
        DeviceConfig {
            io_queues: 16,
            ..DeviceConfig::default()
        },
    )
    .unwrap();
    drop(dev);
    let took = t.elapsed();
    assert!(admin_bell.sleeps() > 0, "the admin thread never slept");
    assert!(
        took < Duration::from_millis(500),
        "open and close took {took:?}"
    );
}

#[test]
fn a_worker_asleep_is_not_woken_by_submissions_to_another_workers_queues() {
    use std::time::Instant;

    let (file, _) = seeded_file();
    let fc = quick_sleeper(file.path(), 2);
    // One I/O queue, SQ 1: worker 1 serves it, worker 0 has nothing to do.
    let dev = one_queue_device(&fc);
    let idle_worker = fc.registers().io_bell(0);
    wait_for_a_sleep(idle_worker, 0);
    let before = idle_worker.sleeps();
    let mut block = vec![0u8; 4096];
    let t = Instant::now();
    for i in 0..2_000u64 {
        dev.read_blocks(i % 256, &mut block).unwrap();
    }
    let took = t.elapsed();
    // Asleep through them all, it sleeps again only at its 50 ms limit; woken by each
    // submission, it would go back to sleep once per read.
    assert_never_woken(
        idle_worker,
        before,
        took,
        "worker 0 during 2,000 reads of its neighbour",
    );
}

#[test]
fn an_inline_queue_is_served_by_the_waiting_thread_and_wakes_no_controller_thread() {
    use std::time::Instant;

    for backend in [FileBackend::Psync, FileBackend::Mmap] {
        let (file, seed) = seeded_file();
        let mut c = quick_sleeper_config(file.path(), backend, 1);
        c.inline_queues = vec![1];
        let fc = FileController::new(c).unwrap();
        assert!(fc.serves_inline(1) && !fc.serves_inline(2));
        let dev = one_queue_device(&fc);
        // The controller's one thread has no I/O queue: it sleeps, and only an inline server
        // can answer the commands below (they would time out otherwise).
        let worker = fc.registers().io_bell(0);
        wait_for_a_sleep(worker, 0);
        let before = (worker.sleeps(), fc.stats().commands);
        let mut block = vec![0u8; 4096];
        let t = Instant::now();
        for i in 0..2_000u64 {
            let lba = i % 256;
            if i % 2 == 0 {
                let at = lba as usize * 4096;
                dev.read_blocks(lba, &mut block).unwrap();
                assert!(
                    block == seed[at..at + 4096],
                    "{backend:?}: block {lba} differs"
                );
            } else {
                dev.write_blocks(lba, &seed[lba as usize * 4096..][..4096])
                    .unwrap();
            }
        }
        let took = t.elapsed();
        // No doorbell of the inline queue rang the sleeper's bell.
        assert_never_woken(
            worker,
            before.0,
            took,
            &format!("{backend:?}: the controller thread"),
        );
        assert_eq!(fc.stats().commands - before.1, 2_000, "{backend:?}");
    }
}

#[test]
fn inline_queues_need_a_backend_the_caller_can_run_and_an_io_queue_number() {
    let file = tempfile::NamedTempFile::new().unwrap();
    file.as_file().set_len(1 << 20).unwrap();
    let mut c = config(file.path(), FileBackend::Uring);
    c.inline_queues = vec![1];
    let e = FileController::new(c).unwrap_err();
    assert!(e.to_string().contains("psync or mmap"), "{e}");
    for q in [0, 9] {
        let mut c = config(file.path(), FileBackend::Mmap);
        c.inline_queues = vec![q];
        let e = FileController::new(c).unwrap_err();
        assert!(e.to_string().contains("not an I/O queue"), "{q}: {e}");
    }
}

/// Unmounts a test's tmpfs when dropped.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_write_to_a_namespace_file_out_of_space_fails_with_capacity_exceeded() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("skipped: mounting a full tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(mounted.success());
    let _guard = Mounted(dir.path().to_path_buf());
    // The mmap backend is left out: a store to a page the file system cannot back is SIGBUS.
    for backend in [FileBackend::Uring, FileBackend::Psync] {
        let path = dir.path().join(format!("{backend:?}.img"));
        // 1 MiB, sparse: the 16 KiB file system backs only the first pages written.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let ctrl: Arc<dyn Controller> = FileController::new(config(&path, backend)).unwrap();
        let dev = NvmeDevice::open(ctrl, DeviceConfig::default()).unwrap();
        dev.write_blocks(0, &[7u8; 4096]).unwrap();
        let e = dev.write_blocks(8, &vec![7u8; 256 << 10]).unwrap_err();
        assert!(
            matches!(
                e,
                gpu_nvme::device::DeviceError::Status { status, .. }
                    if status == gpu_nvme::spec::Status::capacity_exceeded()
            ),
            "{backend:?}: {e}"
        );
        drop(dev);
        std::fs::remove_file(&path).unwrap();
    }
}
