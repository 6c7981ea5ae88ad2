//! The global SSD timing model that every dispatcher shares.
//!
//! This implements the simple timing model of NVMeVirt as SwarmIO describes it (SwarmIO §II-C,
//! "Timing model", Figure 2(b)) and SwarmIO's aggregated updates of it (§IV-D, "Global timing
//! model" and "Aggregated timing model updates").
//!
//! The device is `num_sched_insts` parallel scheduling instances (flash channels, controllers).
//! A request is cut into units of `unit_bytes`; unit `u` (counted from byte 0 of the namespace)
//! runs on instance `u % num_sched_insts`, as NVMeVirt's `(lba >> (unit_shift - 9)) % nr_units`.
//! Each unit occupies its instance for `sched_delay`: `start = max(now, next_free[inst])`,
//! `end = start + sched_delay`, `next_free[inst] = end`. The request's target completion time is
//! its last unit's end plus `min_delay`. Under low load a request therefore completes
//! `sched_delay + min_delay` after it arrives (the target latency); under saturation each
//! instance completes one unit per `sched_delay`, which caps the device at
//! `num_sched_insts / sched_delay` units per second (the target IOPS).
//!
//! From targets the two delays follow SwarmIO's formulas:
//! `sched_delay_ns = 1000 / target_miops * num_sched_insts` and
//! `min_delay = target_latency - sched_delay`.
//!
//! One model serves all dispatcher threads (§IV-D: per-dispatcher models could not model skewed
//! load), so each instance's next-free time is an atomic word on its own cache line. A dispatcher
//! updates it either once per request ([`TimingModel::schedule_one`], NVMeVirt's way and the
//! ablation baseline) or once per fetched batch ([`TimingModel::schedule_batch`], SwarmIO's
//! aggregated update). SwarmIO takes a lock around the update; here a compare-and-swap on each
//! touched instance plays that part.
//!
//! Times are kept in integer picoseconds so that fractional-nanosecond scheduling delays (e.g.
//! 33.3 ns for one instance at 30 MIOPS) do not drift the sustained IOPS; targets are handed out
//! in nanoseconds on the model's clock ([`TimingModel::now_ns`]), rounded up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_utils::CachePadded;
use serde::{Deserialize, Serialize};

/// SwarmIO's default number of scheduling instances.
pub const DEFAULT_NUM_SCHED_INSTS: u32 = 8;

/// The most scheduling instances a model may have (each takes its own padded cache line).
pub const MAX_SCHED_INSTS: u32 = 65_536;

/// The longest delay a model accepts, in picoseconds (2^53 ps, about 2.5 hours): large enough
/// for any device, small enough to convert exactly from `f64` and to leave the model's `u64`
/// picosecond clock (about 213 days) room for many such delays.
pub const MAX_DELAY_PS: u64 = 1 << 53;

const PS_PER_NS: u64 = 1_000;
const PS_PER_US: f64 = 1e6;

/// Instances whose batch cursors live on the stack in [`TimingModel::schedule_batch`]; larger
/// models allocate them per batch.
const STACK_CURSORS: usize = 64;

/// The direction of an I/O request; reads and writes have their own delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoDirection {
    /// Data moves from the device to the host.
    Read,
    /// Data moves from the host to the device.
    Write,
}

/// How a dispatcher applies a fetched batch to the shared model (SwarmIO §IV-D, §VI-C ablation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpdateMode {
    /// One atomic update per request and touched instance (NVMeVirt's way, the ablation baseline).
    PerRequest,
    /// One atomic update per touched instance for the whole batch (SwarmIO's aggregated update).
    Aggregated,
}

/// The delays of one direction, in picoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimingParams {
    /// Time one unit occupies its scheduling instance (`Sched` in SwarmIO Figure 2(b)).
    pub sched_delay_ps: u64,
    /// Delay added after a request's last unit ends (`Min_delay` in SwarmIO Figure 2(b)).
    pub min_delay_ps: u64,
}

impl TimingParams {
    /// Latency of a one-unit request on an idle device, `sched_delay + min_delay`, in ps.
    pub fn unloaded_latency_ps(&self) -> u64 {
        self.sched_delay_ps.saturating_add(self.min_delay_ps)
    }
}

/// Performance targets from which [`TimingConfig::from_targets`] derives the delays.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Targets {
    /// Sustained random-read throughput, in millions of `block_bytes` requests per second.
    pub read_miops: f64,
    /// Unloaded read latency, in microseconds.
    pub read_latency_us: f64,
    /// Sustained random-write throughput, in millions of `block_bytes` requests per second.
    pub write_miops: f64,
    /// Unloaded write latency, in microseconds.
    pub write_latency_us: f64,
    /// Request size the IOPS targets refer to; it becomes the model's unit size, so a request of
    /// `block_bytes` is one unit and larger requests take proportionally longer.
    pub block_bytes: u32,
    /// Size of one logical block, to turn a request's LBA into a byte offset.
    pub lba_bytes: u32,
    /// Number of parallel scheduling instances ([`DEFAULT_NUM_SCHED_INSTS`] in SwarmIO).
    pub num_sched_insts: u32,
}

/// A validated timing configuration: instance count, unit geometry and per-direction delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimingConfig {
    num_sched_insts: u32,
    unit_bytes: u32,
    lba_bytes: u32,
    read: TimingParams,
    write: TimingParams,
}

impl TimingConfig {
    /// Derives the delays from IOPS and latency targets with SwarmIO's formulas:
    /// `sched_delay_ns = 1000 / miops * num_sched_insts` per unit of `block_bytes` and
    /// `min_delay = latency - sched_delay`.
    ///
    /// Fails, naming the offending field, on a zero count or size, a target that is not a
    /// finite positive number, a delay out of range, or a latency below the scheduling delay.
    pub fn from_targets(targets: &Targets) -> Result<Self, TimingError> {
        let insts = validate_num_sched_insts(targets.num_sched_insts)?;
        nonzero("block_bytes", targets.block_bytes)?;
        nonzero("lba_bytes", targets.lba_bytes)?;
        let read = derive_params(
            ("read_miops", targets.read_miops),
            ("read_latency_us", targets.read_latency_us),
            insts,
        )?;
        let write = derive_params(
            ("write_miops", targets.write_miops),
            ("write_latency_us", targets.write_latency_us),
            insts,
        )?;
        Self::explicit(insts, targets.block_bytes, targets.lba_bytes, read, write)
    }

    /// Builds a configuration from explicit delays.
    ///
    /// Fails, naming the offending parameter, on zero instances (or more than
    /// [`MAX_SCHED_INSTS`]), a zero unit or LBA size, a zero scheduling delay, or a delay over
    /// [`MAX_DELAY_PS`].
    pub fn explicit(
        num_sched_insts: u32,
        unit_bytes: u32,
        lba_bytes: u32,
        read: TimingParams,
        write: TimingParams,
    ) -> Result<Self, TimingError> {
        validate_num_sched_insts(num_sched_insts)?;
        nonzero("unit_bytes", unit_bytes)?;
        nonzero("lba_bytes", lba_bytes)?;
        validate_params(IoDirection::Read, &read)?;
        validate_params(IoDirection::Write, &write)?;
        Ok(Self {
            num_sched_insts,
            unit_bytes,
            lba_bytes,
            read,
            write,
        })
    }

    /// Number of parallel scheduling instances.
    pub fn num_sched_insts(&self) -> u32 {
        self.num_sched_insts
    }

    /// Size of the units a request is cut into.
    pub fn unit_bytes(&self) -> u32 {
        self.unit_bytes
    }

    /// Size of one logical block.
    pub fn lba_bytes(&self) -> u32 {
        self.lba_bytes
    }

    /// The delays of one direction.
    pub fn params(&self, op: IoDirection) -> TimingParams {
        match op {
            IoDirection::Read => self.read,
            IoDirection::Write => self.write,
        }
    }

    /// The sustained throughput the model allows in one direction, in units per second:
    /// `num_sched_insts / sched_delay`.
    pub fn max_iops(&self, op: IoDirection) -> f64 {
        f64::from(self.num_sched_insts) * 1e12 / self.params(op).sched_delay_ps as f64
    }

    /// The instances a request's units run on, each with how many of its units it runs.
    ///
    /// The request covers bytes `[lba * lba_bytes, lba * lba_bytes + max(bytes, 1))`; a
    /// zero-length request still occupies the one unit it points at. Consecutive units go to
    /// consecutive instances, so a request touches at most `num_sched_insts` of them.
    fn units_per_instance(&self, lba: u64, bytes: u32) -> impl Iterator<Item = (usize, u64)> {
        let (first_inst, units) = self.unit_span(lba, bytes);
        let insts = u64::from(self.num_sched_insts);
        // Most requests span fewer units than there are instances: no division then.
        let (rounds, extra) = if units < insts {
            (0, units)
        } else {
            (units / insts, units % insts)
        };
        (0..units.min(insts)).map(move |step| {
            // `first_inst` and `step` are below `insts`, so one subtraction wraps the sum, and
            // the result fits `usize` as `insts` is a u32.
            let instance = first_inst + step;
            let instance = if instance >= insts {
                instance - insts
            } else {
                instance
            };
            (instance as usize, rounds + u64::from(step < extra))
        })
    }

    /// The instance of a request's first unit and the number of units it spans.
    fn unit_span(&self, lba: u64, bytes: u32) -> (u64, u64) {
        let (unit, insts) = (u64::from(self.unit_bytes), u64::from(self.num_sched_insts));
        let last_byte_offset = u64::from(bytes.max(1)) - 1;
        let start = lba.checked_mul(u64::from(self.lba_bytes));
        match start.and_then(|start| Some((start, start.checked_add(last_byte_offset)?))) {
            // The usual case, in 64-bit arithmetic (128-bit division is a library call).
            Some((start, end)) => {
                let first = div(start, unit);
                (rem(first, insts), div(end, unit) - first + 1)
            }
            None => {
                let start = u128::from(lba) * u128::from(self.lba_bytes);
                let (first, last) = (
                    start / u128::from(unit),
                    (start + u128::from(last_byte_offset)) / u128::from(unit),
                );
                // Exact: the remainder is below `insts`, and at most 4 GiB span at most 2^32 + 1
                // units.
                (
                    (first % u128::from(insts)) as u64,
                    (last - first + 1) as u64,
                )
            }
        }
    }
}

/// One request as the timing model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimingRequest {
    /// Read or write.
    pub op: IoDirection,
    /// First logical block (the SQE's SLBA).
    pub lba: u64,
    /// Transfer length in bytes.
    pub bytes: u32,
}

/// The shared timing model: one next-free time per scheduling instance, updated atomically by
/// any number of dispatcher threads, and the clock its times refer to.
#[derive(Debug)]
pub struct TimingModel {
    config: TimingConfig,
    epoch: Instant,
    /// Per instance, the time (ps since `epoch`) at which it finishes its last scheduled unit.
    next_free_ps: Box<[CachePadded<AtomicU64>]>,
}

impl TimingModel {
    /// Creates an idle model whose clock starts now.
    pub fn new(config: TimingConfig) -> Self {
        let next_free_ps = (0..config.num_sched_insts)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        Self {
            config,
            epoch: Instant::now(),
            next_free_ps,
        }
    }

    /// The configuration the model runs.
    pub fn config(&self) -> &TimingConfig {
        &self.config
    }

    /// Nanoseconds since the model was created, on a monotonic clock that all threads share.
    /// Both the `now_ns` passed to the scheduling methods and the targets they return are on
    /// this clock (targets stay exact for about 213 days of uptime).
    pub fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The time (ps on the model's clock) at which `instance` finishes its last scheduled unit,
    /// or `None` if there is no such instance.
    pub fn next_free_ps(&self, instance: usize) -> Option<u64> {
        self.next_free_ps
            .get(instance)
            .map(|slot| slot.load(Ordering::Relaxed))
    }

    /// Schedules one request arriving at `now_ns` and returns its target completion time (ns).
    ///
    /// Each instance the request touches is updated with its own compare-and-swap, as NVMeVirt
    /// does per request; several units on one instance are scheduled back to back in one step.
    pub fn schedule_one(&self, now_ns: u64, op: IoDirection, lba: u64, bytes: u32) -> u64 {
        let now_ps = now_ns.saturating_mul(PS_PER_NS);
        let params = self.config.params(op);
        let last_end_ps = self
            .config
            .units_per_instance(lba, bytes)
            .map(|(instance, units)| {
                let busy_ps = units.saturating_mul(params.sched_delay_ps);
                self.reserve(instance, now_ps, busy_ps)
                    .saturating_add(busy_ps)
            })
            .max()
            .unwrap_or(now_ps);
        target_ns(last_end_ps, params)
    }

    /// Schedules a fetched batch of requests arriving at `now_ns` with aggregated updates and
    /// writes each request's target completion time (ns) to the same index of `out`.
    ///
    /// First the batch's scheduling time per instance is summed locally; then each touched
    /// instance is advanced with ONE compare-and-swap, `new = max(old, now) + total`, which
    /// yields the batch's start `base = max(old, now)` there; last, the batch is walked in SQ
    /// order with a local cursor per instance starting at `base`, each unit ending one
    /// `sched_delay` after the previous one on its instance (back-to-back scheduling).
    ///
    /// With one dispatcher this gives exactly [`schedule_one`](Self::schedule_one)'s results
    /// for the same requests in the same order at the same `now`: after the first request that
    /// touches an instance its next-free time is at least `now`, so each later request there
    /// starts exactly where the previous one ended, which is what the cursor computes. With
    /// several dispatchers the total time added to each instance is the same (no update is
    /// lost), but the order differs: a batch reserves one contiguous span per instance, so its
    /// requests are never interleaved with another dispatcher's, while per-request updates let
    /// concurrent requests interleave one by one.
    ///
    /// Fails if `out` is not as long as `requests`.
    pub fn schedule_batch(
        &self,
        now_ns: u64,
        requests: &[TimingRequest],
        out: &mut [u64],
    ) -> Result<(), TimingError> {
        check_batch_lengths(requests, out)?;
        let now_ps = now_ns.saturating_mul(PS_PER_NS);
        let insts = self.next_free_ps.len();
        let mut stack_cursors = [0u64; STACK_CURSORS];
        let mut heap_cursors = Vec::new();
        let cursors: &mut [u64] = if insts <= STACK_CURSORS {
            &mut stack_cursors[..insts]
        } else {
            heap_cursors.resize(insts, 0);
            &mut heap_cursors
        };
        // Pass 1: the batch's total scheduling time per instance.
        for request in requests {
            let sched_ps = self.config.params(request.op).sched_delay_ps;
            for (instance, units) in self.config.units_per_instance(request.lba, request.bytes) {
                let busy_ps = units.saturating_mul(sched_ps);
                cursors[instance] = cursors[instance].saturating_add(busy_ps);
            }
        }
        // Pass 2: one atomic step per touched instance; the cursor becomes the batch's start.
        // Every unit adds at least 1 ps, so a touched instance has a nonzero total.
        for (instance, cursor) in cursors.iter_mut().enumerate() {
            if *cursor > 0 {
                *cursor = self.reserve(instance, now_ps, *cursor);
            }
        }
        // Pass 3: back-to-back assignment in SQ order.
        for (request, target) in requests.iter().zip(out.iter_mut()) {
            let params = self.config.params(request.op);
            let last_end_ps = self
                .config
                .units_per_instance(request.lba, request.bytes)
                .map(|(instance, units)| {
                    let end = cursors[instance]
                        .saturating_add(units.saturating_mul(params.sched_delay_ps));
                    cursors[instance] = end;
                    end
                })
                .max()
                .unwrap_or(now_ps);
            *target = target_ns(last_end_ps, params);
        }
        Ok(())
    }

    /// Schedules a fetched batch with the chosen update mode, writing each request's target
    /// completion time (ns) to the same index of `out`. Fails if the lengths differ.
    pub fn schedule(
        &self,
        mode: UpdateMode,
        now_ns: u64,
        requests: &[TimingRequest],
        out: &mut [u64],
    ) -> Result<(), TimingError> {
        match mode {
            UpdateMode::Aggregated => self.schedule_batch(now_ns, requests, out),
            UpdateMode::PerRequest => {
                check_batch_lengths(requests, out)?;
                for (request, target) in requests.iter().zip(out.iter_mut()) {
                    *target = self.schedule_one(now_ns, request.op, request.lba, request.bytes);
                }
                Ok(())
            }
        }
    }

    /// Occupies `instance` for `busy_ps` from `max(now, next_free)` on and returns that start.
    fn reserve(&self, instance: usize, now_ps: u64, busy_ps: u64) -> u64 {
        let slot = &self.next_free_ps[instance];
        // Relaxed suffices: the word is only a counter that no other memory is published
        // through, and a successful compare-and-swap always acts on its latest value, so no
        // update is lost.
        let mut old = slot.load(Ordering::Relaxed);
        loop {
            let start = old.max(now_ps);
            let new = start.saturating_add(busy_ps);
            match slot.compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return start,
                Err(current) => old = current,
            }
        }
    }
}

/// Errors in timing parameters and scheduling calls.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimingError {
    /// `{param}` must be a finite number greater than zero, got {value}
    #[error("{param} must be a finite number greater than zero, got {value}")]
    NotPositive {
        /// The offending parameter.
        param: &'static str,
        /// Its value.
        value: f64,
    },
    /// `{param}` must be nonzero
    #[error("{param} must be nonzero")]
    Zero {
        /// The offending parameter.
        param: &'static str,
    },
    /// num_sched_insts = {value} exceeds the maximum of {max}
    #[error("num_sched_insts = {value} exceeds the maximum of {max}")]
    TooManyInstances {
        /// The requested instance count.
        value: u32,
        /// [`MAX_SCHED_INSTS`].
        max: u32,
    },
    /// {param} gives a delay of {delay_ps} ps, over the limit of 2^53 ps (about 2.5 hours)
    #[error("{param} gives a delay of {delay_ps} ps, over the limit of 2^53 ps (about 2.5 hours)")]
    DelayOutOfRange {
        /// The parameter the delay comes from.
        param: &'static str,
        /// The delay it gives, in picoseconds.
        delay_ps: f64,
    },
    /// {param} = {value} is too high: the scheduling delay num_sched_insts / {param} is below
    /// 1 ps
    #[error(
        "{param} = {value} is too high: the scheduling delay num_sched_insts / {param} is below \
         1 ps"
    )]
    SchedDelayBelowResolution {
        /// The IOPS parameter.
        param: &'static str,
        /// Its value.
        value: f64,
    },
    /// min_delay would be negative: {latency_param} = {latency_us} us is below the scheduling
    /// delay {sched_delay_us} us = num_sched_insts ({num_sched_insts}) / {miops_param}
    /// ({miops} M/s); raise the latency or the IOPS, or use fewer instances
    #[error(
        "min_delay would be negative: {latency_param} = {latency_us} us is below the scheduling \
         delay {sched_delay_us} us = num_sched_insts ({num_sched_insts}) / {miops_param} \
         ({miops} M/s); raise the latency or the IOPS, or use fewer instances"
    )]
    NegativeMinDelay {
        /// The latency parameter.
        latency_param: &'static str,
        /// Its value in microseconds.
        latency_us: f64,
        /// The scheduling delay derived from the IOPS target, in microseconds.
        sched_delay_us: f64,
        /// The instance count the scheduling delay was derived with.
        num_sched_insts: u32,
        /// The IOPS parameter.
        miops_param: &'static str,
        /// Its value in millions of requests per second.
        miops: f64,
    },
    /// a batch needs one output slot per request: {requests} requests, {slots} slots
    #[error("a batch needs one output slot per request: {requests} requests, {slots} slots")]
    BatchLengthMismatch {
        /// Number of requests.
        requests: usize,
        /// Number of output slots.
        slots: usize,
    },
}

fn validate_num_sched_insts(value: u32) -> Result<u32, TimingError> {
    nonzero("num_sched_insts", value)?;
    if value > MAX_SCHED_INSTS {
        return Err(TimingError::TooManyInstances {
            value,
            max: MAX_SCHED_INSTS,
        });
    }
    Ok(value)
}

fn nonzero(param: &'static str, value: u32) -> Result<(), TimingError> {
    if value == 0 {
        return Err(TimingError::Zero { param });
    }
    Ok(())
}

fn positive_finite(param: &'static str, value: f64) -> Result<(), TimingError> {
    if !(value.is_finite() && value > 0.0) {
        return Err(TimingError::NotPositive { param, value });
    }
    Ok(())
}

fn within_delay_range(param: &'static str, delay_ps: u64) -> Result<(), TimingError> {
    if delay_ps > MAX_DELAY_PS {
        return Err(TimingError::DelayOutOfRange {
            param,
            delay_ps: delay_ps as f64,
        });
    }
    Ok(())
}

/// Converts a delay computed in floating point, rounded to whole picoseconds.
fn delay_ps_from_f64(param: &'static str, delay_ps: f64) -> Result<u64, TimingError> {
    let rounded = delay_ps.round();
    if rounded > MAX_DELAY_PS as f64 {
        return Err(TimingError::DelayOutOfRange { param, delay_ps });
    }
    // Exact: an integer of at most 2^53.
    Ok(rounded as u64)
}

/// SwarmIO's derivation of one direction's delays from its (IOPS, latency) targets.
fn derive_params(
    (miops_param, miops): (&'static str, f64),
    (latency_param, latency_us): (&'static str, f64),
    num_sched_insts: u32,
) -> Result<TimingParams, TimingError> {
    positive_finite(miops_param, miops)?;
    positive_finite(latency_param, latency_us)?;
    // sched_delay_ns = 1000 / miops * insts, i.e. 10^6 / miops * insts picoseconds.
    let sched_delay_ps =
        delay_ps_from_f64(miops_param, PS_PER_US / miops * f64::from(num_sched_insts))?;
    if sched_delay_ps == 0 {
        return Err(TimingError::SchedDelayBelowResolution {
            param: miops_param,
            value: miops,
        });
    }
    let latency_ps = delay_ps_from_f64(latency_param, latency_us * PS_PER_US)?;
    let Some(min_delay_ps) = latency_ps.checked_sub(sched_delay_ps) else {
        return Err(TimingError::NegativeMinDelay {
            latency_param,
            latency_us,
            sched_delay_us: sched_delay_ps as f64 / PS_PER_US,
            num_sched_insts,
            miops_param,
            miops,
        });
    };
    Ok(TimingParams {
        sched_delay_ps,
        min_delay_ps,
    })
}

fn validate_params(op: IoDirection, params: &TimingParams) -> Result<(), TimingError> {
    let (sched_param, min_param) = match op {
        IoDirection::Read => ("read.sched_delay_ps", "read.min_delay_ps"),
        IoDirection::Write => ("write.sched_delay_ps", "write.min_delay_ps"),
    };
    if params.sched_delay_ps == 0 {
        return Err(TimingError::Zero { param: sched_param });
    }
    within_delay_range(sched_param, params.sched_delay_ps)?;
    within_delay_range(min_param, params.min_delay_ps)
}

fn check_batch_lengths(requests: &[TimingRequest], out: &[u64]) -> Result<(), TimingError> {
    if requests.len() != out.len() {
        return Err(TimingError::BatchLengthMismatch {
            requests: requests.len(),
            slots: out.len(),
        });
    }
    Ok(())
}

/// `x / d` for `d > 0`, by a shift when `d` is a power of two, as unit sizes and instance
/// counts nearly always are: this runs several times per request on the dispatchers' hot path.
fn div(x: u64, d: u64) -> u64 {
    if d.is_power_of_two() {
        x >> d.trailing_zeros()
    } else {
        x / d
    }
}

/// `x % d` for `d > 0`, by a mask when `d` is a power of two (see [`div`]).
fn rem(x: u64, d: u64) -> u64 {
    if d.is_power_of_two() {
        x & (d - 1)
    } else {
        x % d
    }
}

/// A request's target in ns: its last unit's end plus `min_delay`, rounded up so that a request
/// never completes before the model allows.
fn target_ns(last_end_ps: u64, params: TimingParams) -> u64 {
    last_end_ps
        .saturating_add(params.min_delay_ps)
        .div_ceil(PS_PER_NS)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;

    const NS: u64 = PS_PER_NS;

    /// A seeded SplitMix64 generator (the crate has no `rand` dev-dependency).
    struct SplitMix64(u64);

    impl SplitMix64 {
        /// A value in `0..bound`, `bound > 0` (modulo bias is irrelevant here).
        fn below(&mut self, bound: u64) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % bound
        }
    }

    fn params_ns(sched_delay_ns: u64, min_delay_ns: u64) -> TimingParams {
        TimingParams {
            sched_delay_ps: sched_delay_ns * NS,
            min_delay_ps: min_delay_ns * NS,
        }
    }

    /// A model with the same delays (in ns) for reads and writes and 512-byte units and LBAs.
    fn model(insts: u32, sched_delay_ns: u64, min_delay_ns: u64) -> TimingModel {
        let params = params_ns(sched_delay_ns, min_delay_ns);
        TimingModel::new(TimingConfig::explicit(insts, 512, 512, params, params).unwrap())
    }

    fn targets(read_miops: f64, read_latency_us: f64, num_sched_insts: u32) -> Targets {
        Targets {
            read_miops,
            read_latency_us,
            write_miops: 1.0,
            write_latency_us: 100.0,
            block_bytes: 512,
            lba_bytes: 512,
            num_sched_insts,
        }
    }

    fn read(lba: u64) -> TimingRequest {
        TimingRequest {
            op: IoDirection::Read,
            lba,
            bytes: 512,
        }
    }

    /// Schedules `total` one-unit reads at t = 0 in batches of `batch`, and returns the latest
    /// target.
    fn last_target_of_burst(
        model: &TimingModel,
        total: u64,
        batch: u64,
        lba: impl Fn(u64) -> u64,
    ) -> u64 {
        let mut last = 0;
        let mut out = vec![0; batch as usize];
        for first in (0..total).step_by(batch as usize) {
            let requests: Vec<_> = (first..total.min(first + batch))
                .map(|i| read(lba(i)))
                .collect();
            out.resize(requests.len(), 0);
            model.schedule_batch(0, &requests, &mut out).unwrap();
            last = last.max(*out.iter().max().unwrap());
        }
        last
    }

    #[test]
    fn derived_delays_follow_swarmio_formulas() {
        let config = TimingConfig::from_targets(&targets(40.0, 50.0, 8)).unwrap();
        // 1000 / 40 * 8 = 200 ns; 50 us - 200 ns = 49.8 us.
        assert_eq!(config.params(IoDirection::Read), params_ns(200, 49_800));
        // 1000 / 1 * 8 = 8 us; 100 us - 8 us = 92 us.
        assert_eq!(config.params(IoDirection::Write), params_ns(8_000, 92_000));
        assert!((config.max_iops(IoDirection::Read) - 40e6).abs() < 1e-3);
        // 2.47 MIOPS (the paper's D7-PS1010): 3238.866... ns, kept to the picosecond.
        let config = TimingConfig::from_targets(&targets(2.47, 50.0, 8)).unwrap();
        assert_eq!(config.params(IoDirection::Read).sched_delay_ps, 3_238_866);
    }

    #[test]
    fn saturated_single_instance_finishes_back_to_back() {
        let (sched, min, now) = (200, 1_000, 5_000);
        let per_request = model(1, sched, min);
        let aggregated = model(1, sched, min);
        let requests: Vec<_> = (0..100).map(read).collect();
        let mut batch_targets = vec![0; requests.len()];
        aggregated
            .schedule_batch(now, &requests, &mut batch_targets)
            .unwrap();
        for (k, request) in (1..).zip(&requests) {
            let expected = now + k * sched + min;
            assert_eq!(
                per_request.schedule_one(now, request.op, request.lba, request.bytes),
                expected
            );
            assert_eq!(batch_targets[k as usize - 1], expected);
        }
    }

    #[test]
    fn low_load_requests_complete_after_sched_plus_min_delay() {
        let (sched, min) = (200, 1_000);
        let per_request = model(1, sched, min);
        let aggregated = model(1, sched, min);
        let mut arrival = 10_000;
        for k in 0..100 {
            arrival += sched + 1 + k % 7;
            assert_eq!(
                per_request.schedule_one(arrival, IoDirection::Read, k, 512),
                arrival + sched + min
            );
            let mut out = [0];
            aggregated
                .schedule_batch(arrival, &[read(k)], &mut out)
                .unwrap();
            assert_eq!(out[0], arrival + sched + min);
        }
    }

    #[test]
    fn sustained_throughput_matches_target_iops() {
        const REQUESTS: u64 = 1_000_000;
        let config = TimingConfig::from_targets(&targets(40.0, 50.0, 8)).unwrap();
        let ideal_ns = REQUESTS as f64 / 40e6 * 1e9;
        // Sequential LBAs spread evenly over the instances.
        let last = last_target_of_burst(&TimingModel::new(config), REQUESTS, 64, |i| i);
        assert!(
            (last as f64 / ideal_ns - 1.0).abs() < 0.005,
            "{last} vs {ideal_ns}"
        );
        // Random LBAs: the busiest instance sets the pace, within 1% for this many requests.
        let mut rng = SplitMix64(7);
        let lbas: Vec<u64> = (0..REQUESTS).map(|_| rng.below(1 << 30)).collect();
        let model = TimingModel::new(config);
        let last = last_target_of_burst(&model, REQUESTS, 64, |i| lbas[i as usize]);
        assert!(
            (last as f64 / ideal_ns - 1.0).abs() < 0.01,
            "{last} vs {ideal_ns}"
        );
        let busy_ps: u64 = (0..8).map(|i| model.next_free_ps(i).unwrap()).sum();
        assert_eq!(busy_ps, REQUESTS * 200 * NS);
    }

    #[test]
    fn fractional_nanosecond_delays_keep_sustained_iops_exact() {
        // One instance at 30 MIOPS: 33.333 ns per request; whole nanoseconds would be 1% off.
        const REQUESTS: u64 = 300_000;
        let model = TimingModel::new(TimingConfig::from_targets(&targets(30.0, 1.0, 1)).unwrap());
        let last = last_target_of_burst(&model, REQUESTS, 64, |i| i);
        let ideal_ns = REQUESTS as f64 / 30e6 * 1e9;
        assert!(
            (last as f64 / ideal_ns - 1.0).abs() < 1e-4,
            "{last} vs {ideal_ns}"
        );
    }

    #[test]
    fn multi_unit_request_occupies_every_instance_it_spans() {
        let (sched, min, now) = (200, 1_000, 3_000);
        let model = model(8, sched, min);
        // 64 KiB = 128 units of 512 B = 16 units on each of the 8 instances.
        assert_eq!(
            model.schedule_one(now, IoDirection::Write, 3, 64 << 10),
            now + 16 * sched + min
        );
        for instance in 0..8 {
            assert_eq!(model.next_free_ps(instance), Some((now + 16 * sched) * NS));
        }
        assert_eq!(model.next_free_ps(8), None);
    }

    #[test]
    fn request_crossing_a_unit_boundary_occupies_both_units() {
        let params = params_ns(100, 0);
        let config = TimingConfig::explicit(4, 4096, 512, params, params).unwrap();
        let model = TimingModel::new(config);
        // LBA 7 is bytes 3584..4096 of unit 0; 1 KiB from there reaches into unit 1.
        assert_eq!(model.schedule_one(0, IoDirection::Read, 7, 1024), 100);
        assert_eq!(model.next_free_ps(0), Some(100 * NS));
        assert_eq!(model.next_free_ps(1), Some(100 * NS));
        assert_eq!(model.next_free_ps(2), Some(0));
        // LBA 17 is in unit 2 of the namespace, on instance 2.
        assert_eq!(model.schedule_one(0, IoDirection::Read, 17, 512), 100);
        assert_eq!(model.next_free_ps(2), Some(100 * NS));
    }

    #[test]
    fn zero_length_request_occupies_one_unit() {
        let model = model(2, 200, 50);
        assert_eq!(model.schedule_one(0, IoDirection::Read, 1, 0), 250);
        assert_eq!(model.next_free_ps(0), Some(0));
        assert_eq!(model.next_free_ps(1), Some(200 * NS));
    }

    #[test]
    fn reads_and_writes_use_their_own_delays() {
        let config =
            TimingConfig::explicit(1, 512, 512, params_ns(100, 1_000), params_ns(300, 2_000))
                .unwrap();
        let model = TimingModel::new(config);
        let requests = [
            read(0),
            TimingRequest {
                op: IoDirection::Write,
                lba: 0,
                bytes: 512,
            },
            read(0),
        ];
        let mut out = [0; 3];
        model.schedule_batch(0, &requests, &mut out).unwrap();
        assert_eq!(out, [1_100, 2_400, 1_500]);
    }

    #[test]
    fn targets_round_up_to_whole_nanoseconds() {
        let params = TimingParams {
            sched_delay_ps: 1_500,
            min_delay_ps: 1,
        };
        let model = TimingModel::new(TimingConfig::explicit(1, 512, 512, params, params).unwrap());
        assert_eq!(model.schedule_one(10, IoDirection::Read, 0, 512), 12); // 11.501 ns
        assert_eq!(model.schedule_one(10, IoDirection::Read, 0, 512), 14); // 13.001 ns
    }

    #[test]
    fn schedule_modes_dispatch_to_their_update() {
        let requests: Vec<_> = (0..10).map(|i| read(i * 3)).collect();
        let (mut per_request, mut aggregated) = ([0; 10], [0; 10]);
        model(4, 200, 100)
            .schedule(UpdateMode::PerRequest, 7, &requests, &mut per_request)
            .unwrap();
        model(4, 200, 100)
            .schedule(UpdateMode::Aggregated, 7, &requests, &mut aggregated)
            .unwrap();
        assert_eq!(per_request, aggregated);
        assert_eq!(per_request[9], 7 + 3 * 200 + 100);
    }

    #[test]
    fn batch_with_wrong_output_length_is_rejected_without_update() {
        let model = model(2, 200, 100);
        let err = model
            .schedule_batch(0, &[read(0), read(1)], &mut [0])
            .unwrap_err();
        assert_eq!(
            err,
            TimingError::BatchLengthMismatch {
                requests: 2,
                slots: 1
            }
        );
        let err = model
            .schedule(UpdateMode::PerRequest, 0, &[read(0)], &mut [])
            .unwrap_err();
        assert_eq!(
            err,
            TimingError::BatchLengthMismatch {
                requests: 1,
                slots: 0
            }
        );
        assert_eq!(model.next_free_ps(0), Some(0));
    }

    #[test]
    fn models_with_many_instances_schedule_batches() {
        // More instances than the stack cursors hold.
        let model = model(100, 200, 0);
        let requests: Vec<_> = (0..300).map(read).collect();
        let mut out = vec![0; 300];
        model.schedule_batch(0, &requests, &mut out).unwrap();
        assert_eq!(out[99], 200);
        assert_eq!(out[299], 600);
    }

    #[test]
    fn clock_starts_near_zero_and_never_goes_back() {
        let model = model(1, 1, 0);
        let first = model.now_ns();
        assert!(first < 1_000_000_000);
        assert!(model.now_ns() >= first);
    }

    fn run_per_request(model: &TimingModel, now: u64, requests: &[TimingRequest]) -> Vec<u64> {
        requests
            .iter()
            .map(|r| model.schedule_one(now, r.op, r.lba, r.bytes))
            .collect()
    }

    fn arb_request() -> impl Strategy<Value = TimingRequest> {
        (any::<bool>(), 0u64..1 << 20, 0u32..40_000).prop_map(|(is_read, lba, bytes)| {
            let op = if is_read {
                IoDirection::Read
            } else {
                IoDirection::Write
            };
            TimingRequest { op, lba, bytes }
        })
    }

    proptest! {
        #[test]
        fn aggregated_and_per_request_updates_agree_single_threaded(
            insts in 1u32..12,
            unit_shift in 9u32..13,
            lba_shift in 9u32..13,
            read_sched_ps in 1u64..5_000_000,
            write_sched_ps in 1u64..5_000_000,
            min_delay_ps in 0u64..50_000_000,
            batches in prop::collection::vec(
                (0u64..2_000_000, prop::collection::vec(arb_request(), 0..48)),
                1..8,
            ),
        ) {
            let read = TimingParams { sched_delay_ps: read_sched_ps, min_delay_ps };
            let write =
                TimingParams { sched_delay_ps: write_sched_ps, min_delay_ps: min_delay_ps / 2 };
            let (unit_bytes, lba_bytes) = (1 << unit_shift, 1 << lba_shift);
            let config = TimingConfig::explicit(insts, unit_bytes, lba_bytes, read, write).unwrap();
            let (one, batched) = (TimingModel::new(config), TimingModel::new(config));
            for (now, requests) in &batches {
                let expected = run_per_request(&one, *now, requests);
                let mut out = vec![0; requests.len()];
                batched.schedule_batch(*now, requests, &mut out).unwrap();
                prop_assert_eq!(&out, &expected);
            }
            for instance in 0..insts as usize {
                prop_assert_eq!(one.next_free_ps(instance), batched.next_free_ps(instance));
            }
        }
    }

    /// The instance counts of a request's units, unit by unit from its byte range.
    fn naive_units_per_instance(config: &TimingConfig, lba: u64, bytes: u32) -> Vec<u64> {
        let start = u128::from(lba) * u128::from(config.lba_bytes());
        let end = start + u128::from(bytes.max(1)) - 1;
        let unit = u128::from(config.unit_bytes());
        let mut counts = vec![0; config.num_sched_insts() as usize];
        for unit_index in start / unit..=end / unit {
            counts[(unit_index % u128::from(config.num_sched_insts())) as usize] += 1;
        }
        counts
    }

    proptest! {
        #[test]
        fn units_map_to_instances_by_byte_offset(
            insts in 1u32..20,
            unit_bytes in 1u32..10_000,
            lba_bytes in 1u32..5_000,
            lba in prop_oneof![0u64..1 << 20, any::<u64>()],
            bytes in 0u32..100_000,
        ) {
            prop_assume!(u64::from(bytes) / u64::from(unit_bytes) < 1_000);
            let params = params_ns(1, 0);
            let config =
                TimingConfig::explicit(insts, unit_bytes, lba_bytes, params, params).unwrap();
            let mut counts = vec![0; insts as usize];
            for (instance, units) in config.units_per_instance(lba, bytes) {
                prop_assert_eq!(counts[instance], 0, "instance {} listed twice", instance);
                counts[instance] = units;
            }
            prop_assert_eq!(counts, naive_units_per_instance(&config, lba, bytes));
        }
    }

    /// Per thread: random batches, half the threads per request and half aggregated.
    fn concurrent_batches(model: &Arc<TimingModel>, clock: fn(&TimingModel) -> u64) -> Vec<u64> {
        const THREADS: u64 = 4;
        const BATCHES: u64 = 1_000;
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let model = Arc::clone(model);
                std::thread::spawn(move || {
                    let mode = if thread % 2 == 0 {
                        UpdateMode::Aggregated
                    } else {
                        UpdateMode::PerRequest
                    };
                    let mut rng = SplitMix64(thread);
                    let mut units_per_instance =
                        vec![0u64; model.config().num_sched_insts() as usize];
                    let mut out = Vec::new();
                    for _ in 0..BATCHES {
                        let len = 1 + rng.below(31);
                        let requests: Vec<_> = (0..len)
                            .map(|_| TimingRequest {
                                op: IoDirection::Read,
                                lba: rng.below(1 << 20),
                                bytes: 512 * (1 + rng.below(3) as u32),
                            })
                            .collect();
                        out.resize(requests.len(), 0);
                        let now = clock(&model);
                        model.schedule(mode, now, &requests, &mut out).unwrap();
                        let unloaded_ns = model
                            .config()
                            .params(IoDirection::Read)
                            .unloaded_latency_ps()
                            / NS;
                        for (request, &target) in requests.iter().zip(&out) {
                            assert!(
                                target >= now + unloaded_ns,
                                "{target} < {now} + {unloaded_ns}"
                            );
                            for (instance, units) in model
                                .config()
                                .units_per_instance(request.lba, request.bytes)
                            {
                                units_per_instance[instance] += units;
                            }
                        }
                    }
                    units_per_instance
                })
            })
            .collect();
        let mut total = vec![0; model.config().num_sched_insts() as usize];
        for handle in handles {
            for (sum, units) in total.iter_mut().zip(handle.join().unwrap()) {
                *sum += units;
            }
        }
        total
    }

    #[test]
    fn concurrent_updates_lose_no_scheduling_time() {
        let model = Arc::new(model(8, 200, 1_000));
        // Everything arrives at t = 0, so each instance's next-free time is exactly the sum of
        // the scheduling time of every unit placed on it.
        let units = concurrent_batches(&model, |_| 0);
        for (instance, units) in units.iter().enumerate() {
            assert_eq!(model.next_free_ps(instance), Some(units * 200 * NS));
        }
    }

    #[test]
    fn concurrent_targets_never_precede_unloaded_latency() {
        let model = Arc::new(model(8, 20, 1_000));
        let units = concurrent_batches(&model, TimingModel::now_ns);
        let scheduled: u64 = units.iter().sum();
        assert!(scheduled > 0);
        // An instance is never free before it has served its units back to back.
        for (instance, units) in units.iter().enumerate() {
            assert!(model.next_free_ps(instance).unwrap() >= units * 20 * NS);
        }
    }

    fn message(targets: &Targets) -> String {
        TimingConfig::from_targets(targets).unwrap_err().to_string()
    }

    #[test]
    fn zero_counts_and_sizes_are_rejected_by_name() {
        let base = targets(40.0, 50.0, 8);
        assert!(
            message(&Targets {
                num_sched_insts: 0,
                ..base
            })
            .contains("num_sched_insts")
        );
        assert!(
            message(&Targets {
                num_sched_insts: MAX_SCHED_INSTS + 1,
                ..base
            })
            .contains("num_sched_insts")
        );
        assert!(
            message(&Targets {
                block_bytes: 0,
                ..base
            })
            .contains("block_bytes")
        );
        assert!(
            message(&Targets {
                lba_bytes: 0,
                ..base
            })
            .contains("lba_bytes")
        );
        let params = params_ns(100, 0);
        let explicit = |insts, unit, lba, read, write| {
            TimingConfig::explicit(insts, unit, lba, read, write)
                .unwrap_err()
                .to_string()
        };
        assert!(explicit(0, 512, 512, params, params).contains("num_sched_insts"));
        assert!(explicit(8, 0, 512, params, params).contains("unit_bytes"));
        assert!(explicit(8, 512, 0, params, params).contains("lba_bytes"));
        let idle = TimingParams {
            sched_delay_ps: 0,
            min_delay_ps: 0,
        };
        assert!(explicit(8, 512, 512, idle, params).contains("read.sched_delay_ps"));
        assert!(explicit(8, 512, 512, params, idle).contains("write.sched_delay_ps"));
        let slow = TimingParams {
            sched_delay_ps: 1,
            min_delay_ps: MAX_DELAY_PS + 1,
        };
        assert!(explicit(8, 512, 512, params, slow).contains("write.min_delay_ps"));
    }

    #[test]
    fn non_positive_or_non_finite_targets_are_rejected_by_name() {
        let base = targets(40.0, 50.0, 8);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let cases = [
                (
                    "read_miops",
                    Targets {
                        read_miops: bad,
                        ..base
                    },
                ),
                (
                    "read_latency_us",
                    Targets {
                        read_latency_us: bad,
                        ..base
                    },
                ),
                (
                    "write_miops",
                    Targets {
                        write_miops: bad,
                        ..base
                    },
                ),
                (
                    "write_latency_us",
                    Targets {
                        write_latency_us: bad,
                        ..base
                    },
                ),
            ];
            for (param, case) in cases {
                let message = message(&case);
                assert!(message.starts_with(param), "{param}: {message}");
                assert!(
                    message.contains("finite number greater than zero"),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn latency_below_sched_delay_reports_negative_min_delay() {
        // 8 instances at 1.5 MIOPS need 5.33 us; 5 us is too little.
        let message = message(&targets(1.5, 5.0, 8));
        assert!(
            message.starts_with("min_delay would be negative: read_latency_us"),
            "{message}"
        );
        assert!(message.contains("read_miops"), "{message}");
        let at_limit = TimingConfig::from_targets(&targets(1.0, 8.0, 8)).unwrap();
        assert_eq!(at_limit.params(IoDirection::Read).min_delay_ps, 0);
    }

    #[test]
    fn targets_beyond_picosecond_resolution_or_range_are_rejected_by_name() {
        assert!(message(&targets(1e7, 50.0, 1)).contains("read_miops"));
        assert!(message(&targets(1e-9, 50.0, 1)).contains("read_miops"));
        assert!(message(&targets(1.0, 1e12, 1)).contains("read_latency_us"));
    }
}
