//! The calling thread's resource usage, from getrusage(RUSAGE_THREAD): what a server worker's
//! stop line and a benchmark phase report of their own thread.

use std::time::Duration;

/// Counters of one thread since it started; differences of two readings give what a span of
/// its work cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// CPU time, user and system.
    pub cpu: Duration,
    /// The part of `cpu` spent in the kernel (system calls, and the network stack's work they
    /// do on the thread's behalf).
    pub system: Duration,
    /// Page faults served without I/O (first touches, mostly).
    pub minor_faults: i64,
    /// Switches away from the thread because it waited.
    pub voluntary_switches: i64,
    /// Switches away from the thread because another took its core.
    pub involuntary_switches: i64,
}

impl ThreadUsage {
    /// The calling thread's counters now (zeros where getrusage fails).
    pub fn now() -> Self {
        // SAFETY: `ru` is a plain C struct owned by this frame that getrusage fills in.
        let (rc, ru) = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            (libc::getrusage(libc::RUSAGE_THREAD, &mut ru), ru)
        };
        if rc != 0 {
            return Self::default();
        }
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Self {
            cpu: time(ru.ru_utime) + time(ru.ru_stime),
            system: time(ru.ru_stime),
            minor_faults: ru.ru_minflt,
            voluntary_switches: ru.ru_nvcsw,
            involuntary_switches: ru.ru_nivcsw,
        }
    }

    /// What was added since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            system: self.system.saturating_sub(earlier.system),
            minor_faults: self.minor_faults - earlier.minor_faults,
            voluntary_switches: self.voluntary_switches - earlier.voluntary_switches,
            involuntary_switches: self.involuntary_switches - earlier.involuntary_switches,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_on_this_thread_counts_its_cpu_and_a_sleep_a_voluntary_switch() {
        let start = ThreadUsage::now();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        std::thread::sleep(Duration::from_millis(5));
        let used = ThreadUsage::now().since(&start);
        assert!(used.cpu >= Duration::from_millis(10), "{used:?}");
        assert!(used.voluntary_switches >= 1, "{used:?}");
        assert!(used.system <= used.cpu, "{used:?}");
        // Another thread's work is not this thread's.
        let before = ThreadUsage::now();
        std::thread::spawn(|| {
            let t = std::time::Instant::now();
            while t.elapsed() < Duration::from_millis(30) {}
        })
        .join()
        .unwrap();
        assert!(ThreadUsage::now().since(&before).cpu < Duration::from_millis(10));
    }
}
