//! The one benchmark record every system's `bench` program emits (ARCHITECTURE.md,
//! "Conventions": benchmarks print a human table and write JSON records in one schema, so
//! `cargo xtask bench` can put systems side by side and plot them).
//!
//! A program measures with [`LatencyRecorder`] (one per thread, merged at the end), builds a
//! [`BenchRecord`] with [`BenchRecord::new`] … [`BenchRecordBuilder::finish`], prints
//! [`BenchRecord::to_json_line`] under `--json` and [`render_table`] otherwise. Files of records
//! are JSON lines: one record per line, read back with [`parse_json_lines`].
//!
//! ```
//! use std::time::{Duration, Instant};
//! use common::bench::{BenchRecord, Engine, LatencyRecorder, parse_json_lines, render_table};
//!
//! let mut latency = LatencyRecorder::new();
//! let start = Instant::now();
//! for _ in 0..1000 {
//!     let issued = Instant::now();
//!     // … one 4 KiB read …
//!     latency.record(issued.elapsed());
//! }
//! let record = BenchRecord::new("gpu-nvme", "randread-4k", Engine::Cpu)
//!     .param("queues", 4)
//!     .ops(1000)
//!     .bytes(1000 * 4096)
//!     .duration(start.elapsed().max(Duration::from_nanos(1)))
//!     .latency(&latency)
//!     .finish()?;
//! let line = record.to_json_line();
//! assert_eq!(parse_json_lines(&line)?, vec![record.clone()]);
//! print!("{}", render_table(&[record]));
//! # Ok::<(), common::bench::BenchError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Version of the record layout; bumped on every incompatible change of [`BenchRecord`].
pub const SCHEMA_VERSION: u32 = 1;

/// Largest latency a [`LatencyRecorder`] resolves (one hour); longer samples saturate to it.
pub const MAX_RECORDED_LATENCY_NS: u64 = 3_600_000_000_000;

/// Significant decimal digits the latency histogram keeps (0.1 % relative error).
const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;

/// Relative tolerance when checking that a parsed record's rates match its counts.
const RATE_TOLERANCE: f64 = 1e-9;

/// Errors building, merging or parsing benchmark records.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// benchmark duration must be positive and finite, got {0} s
    #[error("benchmark duration must be positive and finite, got {0} s")]
    InvalidDuration(f64),
    /// a benchmark record needs at least one completed operation
    #[error("a benchmark record needs at least one completed operation")]
    NoOperations,
    /// the `{0}` field of a benchmark record must not be empty
    #[error("the `{0}` field of a benchmark record must not be empty")]
    EmptyField(&'static str),
    /// latency was requested but the recorder holds no samples
    #[error("latency was requested but the recorder holds no samples")]
    NoLatencySamples,
    /// latency histograms cannot be merged: {0}
    #[error("latency histograms cannot be merged: {0}")]
    Merge(String),
    /// record has schema version {found}, this build reads version {SCHEMA_VERSION}
    #[error("record has schema version {found}, this build reads version {SCHEMA_VERSION}")]
    SchemaVersion {
        /// The version found in the record.
        found: u64,
    },
    /// record field `{field}` is inconsistent: {reason}
    #[error("record field `{field}` is inconsistent: {reason}")]
    Inconsistent {
        /// Name of the offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// record is not valid JSON for this schema: {0}
    #[error("record is not valid JSON for this schema: {0}")]
    Json(#[from] serde_json::Error),
    /// line {line}: {source}
    #[error("line {line}: {source}")]
    Line {
        /// One-based line number in the JSON-lines text.
        line: usize,
        /// Why the line was rejected.
        source: Box<BenchError>,
    },
}

/// Which processor drives the I/O path of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// Host threads submit and complete the I/O.
    Cpu,
    /// GPU threads submit and complete the I/O.
    Gpu,
}

impl Engine {
    /// Lower-case name, as in the JSON record and on command lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Cpu => "cpu",
            Engine::Gpu => "gpu",
        }
    }
}

/// Latency percentiles of a run, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    /// Number of samples behind the percentiles.
    pub samples: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl LatencyUs {
    /// Checks that the values are finite, non-negative and ordered p50 ≤ … ≤ max.
    fn validate(&self) -> Result<(), BenchError> {
        let ordered = [self.p50, self.p90, self.p99, self.p999, self.max];
        let all = ordered.iter().chain(std::iter::once(&self.mean));
        if self.samples == 0 || all.clone().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(inconsistent(
                "latency_us",
                "needs samples and finite non-negative values",
            ));
        }
        if ordered.windows(2).any(|pair| pair[0] > pair[1]) {
            return Err(inconsistent("latency_us", "percentiles must not decrease"));
        }
        Ok(())
    }
}

/// Latency histogram of one measuring thread; merge the threads' recorders at the end.
///
/// Samples are nanoseconds, kept with 3 significant digits up to
/// [`MAX_RECORDED_LATENCY_NS`]; recording never allocates.
#[derive(Debug, Clone)]
pub struct LatencyRecorder {
    histogram: Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        let histogram =
            Histogram::new_with_bounds(1, MAX_RECORDED_LATENCY_NS, LATENCY_SIGNIFICANT_DIGITS)
                .expect("constant histogram bounds are valid");
        Self { histogram }
    }

    /// Records one sample of `nanos` nanoseconds (saturating at [`MAX_RECORDED_LATENCY_NS`]).
    pub fn record_ns(&mut self, nanos: u64) {
        self.histogram.saturating_record(nanos);
    }

    /// Records `count` samples of `nanos` nanoseconds each (a histogram bucket read from a GPU).
    /// Saturates like [`record_ns`](Self::record_ns).
    pub fn record_ns_n(&mut self, nanos: u64, count: u64) {
        self.histogram.saturating_record_n(nanos, count);
    }

    /// Records one sample.
    pub fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.record_ns(nanos);
    }

    /// Adds every sample of `other` (another thread's recorder) to this one.
    pub fn merge(&mut self, other: &LatencyRecorder) -> Result<(), BenchError> {
        self.histogram
            .add(&other.histogram)
            .map_err(|error| BenchError::Merge(format!("{error:?}")))
    }

    /// The recorded samples as `(nanoseconds, count)` pairs, one per distinct bucket, lowest
    /// first: what another process needs to rebuild this recorder with
    /// [`record_ns_n`](Self::record_ns_n) (a histogram sent between processes).
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        self.histogram
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    /// Number of samples recorded.
    pub fn samples(&self) -> u64 {
        self.histogram.len()
    }

    /// Percentiles in microseconds, or `None` when nothing was recorded.
    pub fn summary(&self) -> Option<LatencyUs> {
        if self.histogram.is_empty() {
            return None;
        }
        let micros = |nanos: u64| nanos as f64 / 1e3;
        let at = |quantile: f64| micros(self.histogram.value_at_quantile(quantile));
        Some(LatencyUs {
            samples: self.histogram.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: micros(self.histogram.max()),
            mean: self.histogram.mean() / 1e3,
        })
    }
}

/// The machine a run was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name from `/proc/cpuinfo` (`"unknown"` when unreadable).
    pub cpu_model: String,
    /// Logical CPUs of the machine.
    pub logical_cpus: u32,
    /// Physical memory in bytes (`MemTotal`; 0 when unreadable).
    pub memory_bytes: u64,
    /// Kernel release (`"unknown"` when unreadable).
    pub kernel: String,
    /// GPU name, filled by the caller (this crate has no CUDA); absent on CPU-only machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
}

impl Machine {
    /// Describes this machine's CPU, memory and kernel from `/proc`; no GPU.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let listed_cpus = cpuinfo
            .lines()
            .filter(|line| line.starts_with("processor"))
            .count();
        let logical_cpus = match listed_cpus {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        Self {
            cpu_model: parse_cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".to_owned()),
            logical_cpus: u32::try_from(logical_cpus).unwrap_or(u32::MAX),
            memory_bytes: parse_mem_total_bytes(&meminfo).unwrap_or(0),
            kernel: match kernel.trim() {
                "" => "unknown".to_owned(),
                release => release.to_owned(),
            },
            gpu: None,
        }
    }

    /// The same machine with a GPU of the given name.
    pub fn with_gpu(mut self, name: impl Into<String>) -> Self {
        self.gpu = Some(name.into());
        self
    }
}

/// The first `model name` of a `/proc/cpuinfo` text.
fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn parse_mem_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// One benchmark result: what ran, on what, how fast.
///
/// Build it with [`BenchRecord::new`] or read it with [`BenchRecord::from_json`]; both check the
/// invariants (positive duration, at least one operation, rates matching the counts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRecord {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// System measured, e.g. `gpu-nvme`, `swarmio`, `gofs`.
    pub system: String,
    /// Workload, e.g. `randread-4k`.
    pub workload: String,
    /// Processor driving the I/O.
    pub engine: Engine,
    /// Knobs of the run (queue count, depth, block size, …).
    #[serde(default)]
    pub parameters: BTreeMap<String, Value>,
    /// Completed operations.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Measured wall-clock time in seconds.
    pub duration_s: f64,
    /// Operations per second.
    pub iops: f64,
    /// Decimal gigabytes (1e9 bytes) per second.
    pub gbps: f64,
    /// Per-operation latency; absent when not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<LatencyUs>,
    /// Where it ran.
    pub machine: Machine,
    /// End of the run, RFC 3339 in UTC.
    pub timestamp: String,
    /// Command line of the program that measured.
    pub command: String,
    /// Free-form remarks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// Further system-specific results.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

impl BenchRecord {
    /// Starts a record of `workload` on `system` driven by `engine`.
    #[expect(
        clippy::new_ret_no_self,
        reason = "a record is only ever made complete, through its builder"
    )]
    pub fn new(
        system: impl Into<String>,
        workload: impl Into<String>,
        engine: Engine,
    ) -> BenchRecordBuilder {
        BenchRecordBuilder {
            system: system.into(),
            workload: workload.into(),
            engine,
            parameters: BTreeMap::new(),
            ops: 0,
            bytes: 0,
            duration: Duration::ZERO,
            latency_requested: false,
            latency_us: None,
            machine: None,
            notes: String::new(),
            extra: BTreeMap::new(),
        }
    }

    /// The record as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("a record has string keys and plain fields only")
    }

    /// Parses and checks one record.
    pub fn from_json(text: &str) -> Result<Self, BenchError> {
        let value: Value = serde_json::from_str(text)?;
        let found = value
            .get("schema_version")
            .and_then(Value::as_u64)
            .ok_or_else(|| inconsistent("schema_version", "missing or not an integer"))?;
        if found != u64::from(SCHEMA_VERSION) {
            return Err(BenchError::SchemaVersion { found });
        }
        let record: BenchRecord = serde_json::from_value(value)?;
        record.validate()?;
        Ok(record)
    }

    /// Checks the invariants the builder establishes.
    fn validate(&self) -> Result<(), BenchError> {
        check_names(&self.system, &self.workload)?;
        check_counts(self.ops, self.duration_s)?;
        let expected_iops = self.ops as f64 / self.duration_s;
        let expected_gbps = self.bytes as f64 / self.duration_s / 1e9;
        if !close(self.iops, expected_iops) {
            return Err(inconsistent(
                "iops",
                format!("expected ops / duration_s = {expected_iops}"),
            ));
        }
        if !close(self.gbps, expected_gbps) {
            return Err(inconsistent(
                "gbps",
                format!("expected bytes / duration_s / 1e9 = {expected_gbps}"),
            ));
        }
        if let Some(latency) = &self.latency_us {
            latency.validate()?;
        }
        Ok(())
    }
}

/// Collects the measurements of one run; [`finish`](Self::finish) validates and computes rates.
#[derive(Debug, Clone)]
pub struct BenchRecordBuilder {
    system: String,
    workload: String,
    engine: Engine,
    parameters: BTreeMap<String, Value>,
    ops: u64,
    bytes: u64,
    duration: Duration,
    latency_requested: bool,
    latency_us: Option<LatencyUs>,
    machine: Option<Machine>,
    notes: String,
    extra: BTreeMap<String, Value>,
}

impl BenchRecordBuilder {
    /// Sets one knob of the run (replacing an earlier value of the same name).
    pub fn param(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.parameters.insert(name.into(), value.into());
        self
    }

    /// Sets the number of completed operations.
    pub fn ops(mut self, ops: u64) -> Self {
        self.ops = ops;
        self
    }

    /// Sets the number of bytes moved.
    pub fn bytes(mut self, bytes: u64) -> Self {
        self.bytes = bytes;
        self
    }

    /// Sets the measured wall-clock time.
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    /// Takes the latency percentiles of `recorder` (which must hold samples).
    pub fn latency(mut self, recorder: &LatencyRecorder) -> Self {
        self.latency_requested = true;
        self.latency_us = recorder.summary();
        self
    }

    /// Sets the machine; without it [`finish`](Self::finish) uses [`Machine::detect`].
    pub fn machine(mut self, machine: Machine) -> Self {
        self.machine = Some(machine);
        self
    }

    /// Sets free-form remarks.
    pub fn notes(mut self, notes: impl Into<String>) -> Self {
        self.notes = notes.into();
        self
    }

    /// Adds one system-specific result.
    pub fn extra(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        self.extra.insert(name.into(), value.into());
        self
    }

    /// Validates the measurements and computes IOPS and GB/s; stamps time and command line.
    pub fn finish(self) -> Result<BenchRecord, BenchError> {
        check_names(&self.system, &self.workload)?;
        let duration_s = self.duration.as_secs_f64();
        check_counts(self.ops, duration_s)?;
        if self.latency_requested && self.latency_us.is_none() {
            return Err(BenchError::NoLatencySamples);
        }
        Ok(BenchRecord {
            schema_version: SCHEMA_VERSION,
            system: self.system,
            workload: self.workload,
            engine: self.engine,
            parameters: self.parameters,
            ops: self.ops,
            bytes: self.bytes,
            duration_s,
            iops: self.ops as f64 / duration_s,
            gbps: self.bytes as f64 / duration_s / 1e9,
            latency_us: self.latency_us,
            machine: self.machine.unwrap_or_else(Machine::detect),
            timestamp: rfc3339_utc(SystemTime::now()),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            notes: self.notes,
            extra: self.extra,
        })
    }
}

fn check_names(system: &str, workload: &str) -> Result<(), BenchError> {
    if system.trim().is_empty() {
        return Err(BenchError::EmptyField("system"));
    }
    if workload.trim().is_empty() {
        return Err(BenchError::EmptyField("workload"));
    }
    Ok(())
}

fn check_counts(ops: u64, duration_s: f64) -> Result<(), BenchError> {
    if !(duration_s.is_finite() && duration_s > 0.0) {
        return Err(BenchError::InvalidDuration(duration_s));
    }
    if ops == 0 {
        return Err(BenchError::NoOperations);
    }
    Ok(())
}

fn close(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() <= RATE_TOLERANCE * expected.abs().max(f64::MIN_POSITIVE)
}

fn inconsistent(field: &'static str, reason: impl Into<String>) -> BenchError {
    BenchError::Inconsistent {
        field,
        reason: reason.into(),
    }
}

/// Parses JSON-lines text (one record per line; blank lines are skipped).
pub fn parse_json_lines(text: &str) -> Result<Vec<BenchRecord>, BenchError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(index, line)| {
            BenchRecord::from_json(line).map_err(|source| BenchError::Line {
                line: index + 1,
                source: Box::new(source),
            })
        })
        .collect()
}

/// Formats `time` as RFC 3339 in UTC with second precision, e.g. `2025-05-20T13:04:59Z`.
pub fn rfc3339_utc(time: SystemTime) -> String {
    let seconds: i64 = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            -whole - i64::from(before.subsec_nanos() > 0)
        }
    };
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// Proleptic Gregorian (year, month, day) of a day count since 1970-01-01
/// (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468; // days since 0000-03-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `value` with three significant digits and a K/M/G suffix, e.g. `1.23M`.
pub fn si_suffix(value: f64) -> String {
    let (scaled, suffix) = match value.abs() {
        v if v >= 1e9 => (value / 1e9, "G"),
        v if v >= 1e6 => (value / 1e6, "M"),
        v if v >= 1e3 => (value / 1e3, "K"),
        _ => (value, ""),
    };
    let decimals = match scaled.abs() {
        v if v >= 100.0 => 0,
        v if v >= 10.0 => 1,
        _ => 2,
    };
    format!("{scaled:.decimals$}{suffix}")
}

/// `value` with about three significant digits and no suffix, e.g. `0.162`, `77.8`, `8053`.
fn three_digits(value: f64) -> String {
    let decimals = match value.abs() {
        v if v >= 100.0 => 0,
        v if v >= 10.0 => 1,
        v if v >= 1.0 => 2,
        _ => 3,
    };
    format!("{value:.decimals$}")
}

/// One row of the side-by-side table.
struct Row {
    label: String,
    cells: Vec<String>,
    numeric: bool,
}

/// Prints `records` to stdout: one JSON line each with `json` (the common record for
/// machines), else the side-by-side table; returns whether it printed the table (a benchmark
/// then adds its own summary lines for people).
pub fn print_records(records: &[BenchRecord], json: bool) -> bool {
    if json {
        for r in records {
            println!("{}", r.to_json_line());
        }
    } else {
        print!("{}", render_table(records));
    }
    !json
}

/// Sets `records` side by side: one column per record, one row per field and parameter.
pub fn render_table(records: &[BenchRecord]) -> String {
    if records.is_empty() {
        return "(no benchmark records)\n".to_owned();
    }
    let text_row = |label: &str, cell: &dyn Fn(&BenchRecord) -> String| Row {
        label: label.to_owned(),
        cells: records.iter().map(cell).collect(),
        numeric: false,
    };
    let number_row = |label: &str, cell: &dyn Fn(&BenchRecord) -> String| Row {
        numeric: true,
        ..text_row(label, cell)
    };
    let latency_row = |label: &str, pick: fn(&LatencyUs) -> f64| {
        number_row(label, &|record| {
            record
                .latency_us
                .as_ref()
                .map_or_else(|| "-".to_owned(), |latency| three_digits(pick(latency)))
        })
    };

    let mut rows = vec![
        text_row("system", &|record| record.system.clone()),
        text_row("workload", &|record| record.workload.clone()),
        text_row("engine", &|record| record.engine.as_str().to_owned()),
    ];
    let parameter_names: std::collections::BTreeSet<&String> = records
        .iter()
        .flat_map(|record| record.parameters.keys())
        .collect();
    for name in parameter_names {
        rows.push(text_row(name, &|record| {
            record
                .parameters
                .get(name)
                .map_or_else(|| "-".to_owned(), display_value)
        }));
    }
    rows.extend([
        number_row("ops", &|record| record.ops.to_string()),
        number_row("duration (s)", &|record| {
            format!("{:.2}", record.duration_s)
        }),
        number_row("IOPS", &|record| si_suffix(record.iops)),
        number_row("GB/s", &|record| three_digits(record.gbps)),
        latency_row("p50 (us)", |latency| latency.p50),
        latency_row("p99 (us)", |latency| latency.p99),
        latency_row("p99.9 (us)", |latency| latency.p999),
    ]);
    layout(&rows)
}

/// A parameter value as a table cell: strings without quotes, everything else as JSON.
fn display_value(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Aligns `rows` into columns: labels left, text cells left, numeric cells right.
fn layout(rows: &[Row]) -> String {
    let width = |text: &str| text.chars().count();
    let label_width = rows.iter().map(|row| width(&row.label)).max().unwrap_or(0);
    let columns = rows.first().map_or(0, |row| row.cells.len());
    let column_widths: Vec<usize> = (0..columns)
        .map(|column| {
            rows.iter()
                .map(|row| width(&row.cells[column]))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = format!("{:<label_width$}", row.label);
        for (cell, cell_width) in row.cells.iter().zip(&column_widths) {
            let padding = " ".repeat(cell_width - width(cell));
            if row.numeric {
                let _ = write!(line, "  {padding}{cell}");
            } else {
                let _ = write!(line, "  {cell}{padding}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn machine() -> Machine {
        Machine {
            cpu_model: "Test CPU".to_owned(),
            logical_cpus: 2,
            memory_bytes: 1 << 30,
            kernel: "6.1.0".to_owned(),
            gpu: None,
        }
    }

    fn sample_record() -> BenchRecord {
        let mut recorder = LatencyRecorder::new();
        for micros in 1..=100 {
            recorder.record(Duration::from_micros(micros));
        }
        BenchRecord::new("gpu-nvme", "randread-4k", Engine::Gpu)
            .param("queues", 4)
            .param("controller", "swarmio")
            .ops(2_000_000)
            .bytes(2_000_000 * 4096)
            .duration(Duration::from_millis(500))
            .latency(&recorder)
            .machine(machine().with_gpu("NVIDIA H100"))
            .notes("unit test")
            .extra("retries", 0)
            .finish()
            .unwrap()
    }

    #[test]
    fn json_line_roundtrips_to_an_equal_record() {
        let record = sample_record();
        let line = record.to_json_line();
        assert!(!line.contains('\n'));
        assert_eq!(BenchRecord::from_json(&line).unwrap(), record);
    }

    #[test]
    fn json_uses_the_documented_field_names() {
        let value: Value = serde_json::from_str(&sample_record().to_json_line()).unwrap();
        assert_eq!(value["engine"], "gpu");
        assert_eq!(value["parameters"]["queues"], 4);
        assert_eq!(value["machine"]["gpu"], "NVIDIA H100");
        assert_eq!(value["schema_version"], SCHEMA_VERSION);
        assert!(value["latency_us"]["p999"].is_f64());
    }

    #[test]
    fn unmeasured_latency_is_absent_from_json() {
        let record = BenchRecord::new("swarmio", "seqwrite-128k", Engine::Cpu)
            .ops(10)
            .bytes(10 * 131_072)
            .duration(Duration::from_secs(1))
            .machine(machine())
            .finish()
            .unwrap();
        let line = record.to_json_line();
        assert!(!line.contains("latency_us"));
        assert_eq!(BenchRecord::from_json(&line).unwrap().latency_us, None);
    }

    #[test]
    fn iops_and_gbps_are_ops_and_decimal_gigabytes_per_second() {
        let record = sample_record();
        assert_eq!(record.duration_s, 0.5);
        assert_eq!(record.iops, 4_000_000.0);
        assert!((record.gbps - 2_000_000.0 * 4096.0 / 0.5 / 1e9).abs() < 1e-12);
    }

    #[test]
    fn zero_duration_is_rejected() {
        let result = BenchRecord::new("gofs", "create", Engine::Cpu)
            .ops(1)
            .duration(Duration::ZERO)
            .machine(machine())
            .finish();
        assert!(matches!(result, Err(BenchError::InvalidDuration(d)) if d == 0.0));
    }

    #[test]
    fn zero_operations_and_empty_names_are_rejected() {
        let builder = |system: &str, workload: &str, ops| {
            BenchRecord::new(system, workload, Engine::Cpu)
                .ops(ops)
                .duration(Duration::from_secs(1))
                .machine(machine())
                .finish()
        };
        assert!(matches!(
            builder("gofs", "stat", 0),
            Err(BenchError::NoOperations)
        ));
        assert!(matches!(
            builder(" ", "stat", 1),
            Err(BenchError::EmptyField("system"))
        ));
        assert!(matches!(
            builder("gofs", "", 1),
            Err(BenchError::EmptyField("workload"))
        ));
    }

    #[test]
    fn empty_latency_recorder_is_rejected() {
        let result = BenchRecord::new("gofs", "stat", Engine::Cpu)
            .ops(1)
            .duration(Duration::from_secs(1))
            .latency(&LatencyRecorder::new())
            .machine(machine())
            .finish();
        assert!(matches!(result, Err(BenchError::NoLatencySamples)));
    }

    #[test]
    fn parsing_rejects_other_schema_versions_and_inconsistent_rates() {
        let mut value: Value = serde_json::from_str(&sample_record().to_json_line()).unwrap();
        value["schema_version"] = (SCHEMA_VERSION + 1).into();
        let result = BenchRecord::from_json(&value.to_string());
        assert!(matches!(result, Err(BenchError::SchemaVersion { .. })));

        let mut value: Value = serde_json::from_str(&sample_record().to_json_line()).unwrap();
        value["iops"] = 1.0.into();
        let result = BenchRecord::from_json(&value.to_string());
        assert!(matches!(
            result,
            Err(BenchError::Inconsistent { field: "iops", .. })
        ));

        let mut value: Value = serde_json::from_str(&sample_record().to_json_line()).unwrap();
        value["duration_s"] = 0.0.into();
        let result = BenchRecord::from_json(&value.to_string());
        assert!(matches!(result, Err(BenchError::InvalidDuration(_))));

        let mut value: Value = serde_json::from_str(&sample_record().to_json_line()).unwrap();
        value["latency_us"]["p50"] = 1e9.into();
        let result = BenchRecord::from_json(&value.to_string());
        assert!(matches!(
            result,
            Err(BenchError::Inconsistent {
                field: "latency_us",
                ..
            })
        ));

        assert!(matches!(
            BenchRecord::from_json("{"),
            Err(BenchError::Json(_))
        ));
    }

    #[test]
    fn json_lines_skip_blank_lines_and_name_the_bad_line() {
        let line = sample_record().to_json_line();
        let text = format!("{line}\n\n{line}\n");
        assert_eq!(parse_json_lines(&text).unwrap().len(), 2);
        let text = format!("{line}\nnot json\n");
        let error = parse_json_lines(&text).unwrap_err();
        assert!(matches!(error, BenchError::Line { line: 2, .. }));
    }

    #[test]
    fn percentiles_of_a_uniform_distribution_are_within_histogram_precision() {
        let mut recorder = LatencyRecorder::new();
        for micros in 1..=10_000u64 {
            recorder.record_ns(micros * 1000);
        }
        let summary = recorder.summary().unwrap();
        let near = |actual: f64, expected: f64| (actual - expected).abs() <= expected * 1e-3;
        assert_eq!(summary.samples, 10_000);
        assert!(near(summary.p50, 5_000.0), "p50 {}", summary.p50);
        assert!(near(summary.p90, 9_000.0), "p90 {}", summary.p90);
        assert!(near(summary.p99, 9_900.0), "p99 {}", summary.p99);
        assert!(near(summary.p999, 9_990.0), "p999 {}", summary.p999);
        assert!(near(summary.max, 10_000.0), "max {}", summary.max);
        assert!(near(summary.mean, 5_000.5), "mean {}", summary.mean);
    }

    #[test]
    fn merging_per_thread_recorders_equals_recording_in_one() {
        let mut single = LatencyRecorder::new();
        for nanos in 0..40_000u64 {
            single.record_ns(nanos * 37 % 1_000_000);
        }
        let parts: Vec<LatencyRecorder> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4u64)
                .map(|thread| {
                    scope.spawn(move || {
                        let mut recorder = LatencyRecorder::new();
                        for nanos in (thread * 10_000)..((thread + 1) * 10_000) {
                            recorder.record_ns(nanos * 37 % 1_000_000);
                        }
                        recorder
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().unwrap())
                .collect()
        });
        let mut merged = LatencyRecorder::new();
        for part in &parts {
            merged.merge(part).unwrap();
        }
        assert_eq!(merged.summary(), single.summary());
    }

    #[test]
    fn a_recorder_rebuilt_from_its_buckets_has_the_same_summary() {
        let mut sent = LatencyRecorder::new();
        for nanos in 0..20_000u64 {
            sent.record_ns(nanos * 7_919 % 3_000_000 + 1);
        }
        let buckets = sent.buckets();
        assert!(buckets.windows(2).all(|pair| pair[0].0 < pair[1].0));
        assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), 20_000);
        let mut rebuilt = LatencyRecorder::new();
        for (nanos, count) in buckets {
            rebuilt.record_ns_n(nanos, count);
        }
        assert_eq!(rebuilt.summary(), sent.summary());
    }

    #[test]
    fn recording_a_bucket_of_samples_equals_recording_each() {
        let mut each = LatencyRecorder::new();
        let mut bucketed = LatencyRecorder::new();
        for (nanos, count) in [(0, 3), (1_500, 40), (20_000, 7), (u64::MAX, 2)] {
            for _ in 0..count {
                each.record_ns(nanos);
            }
            bucketed.record_ns_n(nanos, count);
        }
        assert_eq!(bucketed.samples(), 52);
        assert_eq!(bucketed.summary(), each.summary());
    }

    #[test]
    fn latencies_beyond_the_range_saturate() {
        let mut recorder = LatencyRecorder::new();
        recorder.record(Duration::from_secs(365 * 24 * 3600));
        let max_us = recorder.summary().unwrap().max;
        let limit_us = MAX_RECORDED_LATENCY_NS as f64 / 1e3;
        assert!((max_us - limit_us).abs() <= limit_us * 1e-3);
    }

    #[test]
    fn table_has_a_column_for_every_record_and_a_row_for_every_parameter() {
        let gpu = sample_record();
        let mut cpu = sample_record();
        cpu.system = "swarmio".to_owned();
        cpu.engine = Engine::Cpu;
        cpu.parameters.insert("depth".to_owned(), 32.into());
        cpu.latency_us = None;
        let table = render_table(&[gpu, cpu]);
        let lines: Vec<&str> = table.lines().collect();
        let row = |label: &str| {
            let line = lines.iter().find(|line| line.starts_with(label)).unwrap();
            line.split_whitespace()
                .skip(label.split_whitespace().count())
                .collect::<Vec<_>>()
        };
        assert_eq!(row("system"), ["gpu-nvme", "swarmio"]);
        assert_eq!(row("engine"), ["gpu", "cpu"]);
        assert_eq!(row("depth"), ["-", "32"]);
        assert_eq!(row("controller"), ["swarmio", "swarmio"]);
        assert_eq!(row("IOPS"), ["4.00M", "4.00M"]);
        assert_eq!(row("p50 (us)")[1], "-");
        let widths: Vec<usize> = lines.iter().map(|line| line.chars().count()).collect();
        let numeric_width = widths[lines.iter().position(|l| l.starts_with("ops")).unwrap()];
        assert!(
            lines
                .iter()
                .filter(|line| ["ops", "IOPS", "GB/s"].iter().any(|l| line.starts_with(l)))
                .all(|line| line.chars().count() == numeric_width)
        );
    }

    #[test]
    fn table_of_no_records_says_so() {
        assert_eq!(render_table(&[]), "(no benchmark records)\n");
    }

    #[test]
    fn numbers_in_the_table_keep_three_significant_digits() {
        assert_eq!(si_suffix(999.0), "999");
        assert_eq!(si_suffix(1_234.0), "1.23K");
        assert_eq!(si_suffix(12_345_678.0), "12.3M");
        assert_eq!(si_suffix(2.5e9), "2.50G");
        assert_eq!(si_suffix(0.5), "0.50");
        assert_eq!(three_digits(0.1234), "0.123");
        assert_eq!(three_digits(3.245), "3.25");
        assert_eq!(three_digits(77.84), "77.8");
        assert_eq!(three_digits(8052.7), "8053");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let at = |seconds: u64| rfc3339_utc(UNIX_EPOCH + Duration::from_secs(seconds));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_747_746_299), "2025-05-20T13:04:59Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
        let before = UNIX_EPOCH - Duration::from_millis(500);
        assert_eq!(rfc3339_utc(before), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn machine_fields_parse_from_proc_texts() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n";
        assert_eq!(
            parse_cpu_model(cpuinfo).as_deref(),
            Some("AMD EPYC 9654 96-Core Processor")
        );
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
        let meminfo = "MemTotal:       16384 kB\nMemFree:  1 kB\n";
        assert_eq!(parse_mem_total_bytes(meminfo), Some(16384 * 1024));
        assert_eq!(parse_mem_total_bytes("MemFree: 1 kB\n"), None);
        let detected = Machine::detect();
        assert!(detected.logical_cpus >= 1);
        assert_eq!(detected.gpu, None);
    }

    proptest! {
        #[test]
        fn any_valid_record_roundtrips(
            ops in 1u64..u64::MAX,
            bytes in any::<u64>(),
            nanos in 1u64..u64::MAX,
            queues in any::<i64>(),
            label in "[a-z0-9 _-]{0,12}",
        ) {
            let record = BenchRecord::new("gpu-nvme", "randread", Engine::Cpu)
                .param("queues", queues)
                .param("label", label)
                .ops(ops)
                .bytes(bytes)
                .duration(Duration::from_nanos(nanos))
                .machine(machine())
                .finish()
                .unwrap();
            let mut parsed = BenchRecord::from_json(&record.to_json_line()).unwrap();
            // serde_json's default float parser may be one unit in the last place off.
            for (parsed, written) in [
                (&mut parsed.duration_s, record.duration_s),
                (&mut parsed.iops, record.iops),
                (&mut parsed.gbps, record.gbps),
            ] {
                prop_assert!((*parsed - written).abs() <= written * 1e-15);
                *parsed = written;
            }
            prop_assert_eq!(parsed, record);
        }

        #[test]
        fn day_counts_map_to_valid_calendar_dates(days in -1_000_000i64..1_000_000) {
            let (year, month, day) = civil_from_days(days);
            let (next_year, next_month, next_day) = civil_from_days(days + 1);
            prop_assert!((1..=12).contains(&month) && (1..=31).contains(&day));
            let next_is_tomorrow = (next_year, next_month, next_day) == (year, month, day + 1)
                || (next_day == 1 && (next_month == month % 12 + 1))
                    && next_year == year + i64::from(month == 12);
            prop_assert!(next_is_tomorrow);
        }
    }
}
