//! How the `peakfs` tools print attributes, listings and usage: text for people (in the shape
//! of coreutils' `stat`, `ls -l` and `df -h`) and JSON objects for scripts.

use serde_json::{Value, json};

use crate::placement::Route;
use crate::protocol::{Attr, StatFs};

/// The file type's name, as `stat` prints it.
pub fn type_name(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "regular file",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symbolic link",
        libc::S_IFCHR => "character special file",
        libc::S_IFBLK => "block special file",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        _ => "unknown",
    }
}

/// `drwxr-xr-x`: the type letter and the nine permission bits, with setuid, setgid and sticky
/// shown in the execute places as `ls` does.
pub fn mode_string(mode: u32) -> String {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'l',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        libc::S_IFIFO => 'p',
        libc::S_IFSOCK => 's',
        libc::S_IFREG => '-',
        _ => '?',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    // (read bit, write bit, execute bit, special bit, letter when special and executable)
    let triples = [
        (0o400, 0o200, 0o100, libc::S_ISUID, 's'),
        (0o040, 0o020, 0o010, libc::S_ISGID, 's'),
        (0o004, 0o002, 0o001, libc::S_ISVTX, 't'),
    ];
    for (r, w, x, special, letter) in triples {
        s.push(if mode & r != 0 { 'r' } else { '-' });
        s.push(if mode & w != 0 { 'w' } else { '-' });
        s.push(match (mode & x != 0, mode & special != 0) {
            (true, true) => letter,
            (false, true) => letter.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// Nanoseconds since the epoch as `2026-12-07 17:10:49.012200422 UTC` (times before 1970
/// included: a file system accepts any `utimensat`).
pub fn time_string(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let (days, of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{nanos:09} UTC",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `peakfs stat`'s text.
pub fn stat_text(path: &str, a: &Attr) -> String {
    let mut s = format!(
        "  File: {path}\n  Size: {:<15} {}\n Inode: {:<15} Links: {}\n",
        a.size,
        type_name(a.mode),
        a.ino,
        a.nlink
    );
    if matches!(a.mode & libc::S_IFMT, libc::S_IFCHR | libc::S_IFBLK) {
        s += &format!(
            "Device type: {},{}\n",
            libc::major(u64::from(a.rdev)),
            libc::minor(u64::from(a.rdev))
        );
    }
    s += &format!(
        "Access: ({:04o}/{})  Uid: {}  Gid: {}\n",
        a.mode & 0o7777,
        mode_string(a.mode),
        a.uid,
        a.gid
    );
    s += &format!("Access: {}\n", time_string(a.atime_ns));
    s += &format!("Modify: {}\n", time_string(a.mtime_ns));
    s += &format!("Change: {}\n", time_string(a.ctime_ns));
    let unit = match a.io_unit {
        0 => "none".to_string(),
        n => n.to_string(),
    };
    s += &format!("  Dist: {}  I/O unit: {unit}\n", a.hint.words());
    s
}

/// `peakfs stat --json`'s object (and each entry's attributes in `peakfs ls --long --json`).
pub fn stat_json(a: &Attr) -> Value {
    json!({
        "ino": a.ino, "type": type_name(a.mode), "mode": a.mode, "uid": a.uid, "gid": a.gid,
        "nlink": a.nlink, "size": a.size, "atime_ns": a.atime_ns, "mtime_ns": a.mtime_ns,
        "ctime_ns": a.ctime_ns, "rdev": a.rdev, "hint": a.hint.to_byte(),
        "dist": a.hint.words(), "io_unit": a.io_unit,
    })
}

/// One line of `peakfs ls --long`: mode, links, owner, group, size, modification time, name.
pub fn long_line(name: &str, a: &Attr) -> String {
    // Seconds are enough in a listing.
    let mtime = time_string(a.mtime_ns);
    format!(
        "{} {:>3} {:>5} {:>5} {:>12} {} {name}",
        mode_string(a.mode),
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        &mtime[..19]
    )
}

/// Bytes in binary units with one decimal (`232.2M`), as `df -h` prints them.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n}")
    } else {
        format!("{v:.1}{}", UNITS[unit])
    }
}

/// `used` of `total` in whole percent, rounded up as `df` does (0 of 0 is 0 %).
fn percent(used: u64, total: u64) -> u64 {
    if total == 0 {
        0
    } else {
        (u128::from(used) * 100).div_ceil(u128::from(total)) as u64
    }
}

/// `peakfs df`'s text: a header line, one line for each of `slices` (server and worker in
/// the first column; none without `--slices`) and the cluster's line.
pub fn df_text(total: &StatFs, slices: &[(Route, StatFs)]) -> String {
    let mut text = format!(
        "{:<9} {:>8} {:>8} {:>8} {:>4} {:>12} {:>12} {:>12} {:>5}\n",
        "Slice", "Size", "Used", "Avail", "Use%", "Inodes", "IUsed", "IFree", "IUse%",
    );
    for (route, s) in slices {
        text += &df_line(&format!("{}/{}", route.server, route.worker), s);
    }
    text += &df_line("total", total);
    text
}

/// One line of `peakfs df`.
fn df_line(name: &str, s: &StatFs) -> String {
    let free = s.bytes_total.saturating_sub(s.bytes_used);
    let ifree = s.inodes_total.saturating_sub(s.inodes_used);
    format!(
        "{name:<9} {:>8} {:>8} {:>8} {:>3}% {:>12} {:>12} {:>12} {:>4}%\n",
        human_bytes(s.bytes_total),
        human_bytes(s.bytes_used),
        human_bytes(free),
        percent(s.bytes_used, s.bytes_total),
        s.inodes_total,
        s.inodes_used,
        ifree,
        percent(s.inodes_used, s.inodes_total)
    )
}

/// `peakfs df --json`'s object: the cluster's usage, and with `--slices` each slice's under
/// "slices" (with its "server" and "worker").
pub fn df_json(total: &StatFs, slices: &[(Route, StatFs)]) -> Value {
    let usage = |s: &StatFs| {
        json!({
            "bytes_total": s.bytes_total, "bytes_used": s.bytes_used,
            "bytes_free": s.bytes_total.saturating_sub(s.bytes_used),
            "inodes_total": s.inodes_total, "inodes_used": s.inodes_used,
            "inodes_free": s.inodes_total.saturating_sub(s.inodes_used),
        })
    };
    let mut out = usage(total);
    if !slices.is_empty() {
        out["slices"] = slices
            .iter()
            .map(|(route, s)| {
                let mut one = usage(s);
                one["server"] = route.server.into();
                one["worker"] = route.worker.into();
                one
            })
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_as_ls_writes_them() {
        assert_eq!(mode_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o644), "-rw-r--r--");
        assert_eq!(mode_string(libc::S_IFREG | 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o2644), "-rw-r-Sr--");
        assert_eq!(mode_string(libc::S_IFDIR | 0o1777), "drwxrwxrwt");
        assert_eq!(mode_string(libc::S_IFDIR | 0o1770), "drwxrwx--T");
        assert_eq!(mode_string(libc::S_IFLNK | 0o777), "lrwxrwxrwx");
        assert_eq!(mode_string(libc::S_IFCHR | 0o600), "crw-------");
        assert_eq!(mode_string(libc::S_IFIFO), "p---------");
    }

    #[test]
    fn times_match_known_dates_on_both_sides_of_the_epoch() {
        assert_eq!(time_string(0), "1970-01-01 00:00:00.000000000 UTC");
        assert_eq!(
            time_string(1_796_663_049_012_200_422),
            "2026-12-07 17:04:09.012200422 UTC"
        );
        // 2000-02-29 (a leap day of a century year divisible by 400).
        assert_eq!(
            time_string(951_782_400 * 1_000_000_000),
            "2000-02-29 00:00:00.000000000 UTC"
        );
        // One nanosecond before the epoch.
        assert_eq!(time_string(-1), "1969-12-31 23:59:59.999999999 UTC");
        assert_eq!(
            time_string(-86_400 * 1_000_000_000 * 365),
            "1969-01-01 00:00:00.000000000 UTC"
        );
        // The extremes of an i64 do not overflow.
        assert!(time_string(i64::MIN).ends_with(" UTC"));
        assert!(time_string(i64::MAX).starts_with("2262-04-11 23:47:16"));
    }

    #[test]
    fn dates_agree_with_a_day_by_day_walk() {
        // Walk the calendar from 1970 both ways, one day at a time, for 500 years each way.
        let month_len = |y: i64, m: u32| match m {
            2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let (mut y, mut m, mut d) = (1970i64, 1u32, 1u32);
        for days in 0..500 * 366 {
            assert_eq!(civil_from_days(days), (y, m, d), "day {days}");
            d += 1;
            if d > month_len(y, m) {
                (d, m) = (1, m + 1);
                if m > 12 {
                    (m, y) = (1, y + 1);
                }
            }
        }
        let (mut y, mut m, mut d) = (1969i64, 12u32, 31u32);
        for days in 1..500 * 366 {
            assert_eq!(civil_from_days(-days), (y, m, d), "day -{days}");
            d -= 1;
            if d == 0 {
                m -= 1;
                if m == 0 {
                    (m, y) = (12, y - 1);
                }
                d = month_len(y, m);
            }
        }
    }

    #[test]
    fn df_rounds_usage_up_and_prints_binary_units() {
        assert_eq!(human_bytes(1023), "1023");
        assert_eq!(human_bytes(1024), "1.0K");
        assert_eq!(human_bytes(244_473_856), "233.1M");
        assert_eq!(percent(1, 1000), 1);
        assert_eq!(percent(0, 0), 0);
        assert_eq!(percent(u64::MAX, u64::MAX), 100);
        let total = StatFs {
            bytes_total: 244_473_856,
            bytes_used: 1_015_808,
            inodes_total: 16_384,
            inodes_used: 3,
        };
        let text = df_text(&total, &[]);
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let fields: Vec<_> = lines[1].split_whitespace().skip(1).collect();
        assert_eq!(
            fields,
            [
                "233.1M", "992.0K", "232.2M", "1%", "16384", "3", "16381", "1%"
            ]
        );
        let half = StatFs {
            bytes_total: total.bytes_total / 2,
            inodes_total: total.inodes_total / 2,
            ..total
        };
        let slices = [
            (
                Route {
                    server: 0,
                    worker: 1,
                },
                half,
            ),
            (
                Route {
                    server: 1,
                    worker: 0,
                },
                StatFs {
                    bytes_used: 0,
                    inodes_used: 0,
                    ..half
                },
            ),
        ];
        let text = df_text(&total, &slices);
        let firsts: Vec<_> = text
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(firsts, ["Slice", "0/1", "1/0", "total"]);
        let j = df_json(&total, &slices);
        assert_eq!(j["inodes_free"], 16_381);
        assert_eq!(j["slices"][0]["worker"], 1);
        assert_eq!(j["slices"][1]["server"], 1);
        assert_eq!(j["slices"][1]["bytes_free"], half.bytes_total);
        assert!(df_json(&total, &[]).get("slices").is_none());
    }

    #[test]
    fn stat_text_names_every_attribute() {
        let a = Attr {
            ino: 7,
            mode: libc::S_IFCHR | 0o640,
            uid: 1000,
            gid: 100,
            nlink: 1,
            size: 0,
            atime_ns: 0,
            mtime_ns: -1,
            ctime_ns: 1_000_000_000,
            rdev: libc::makedev(8, 1) as u32,
            ..Attr::default()
        };
        let text = stat_text("/dev/sda1", &a);
        for want in [
            "  File: /dev/sda1\n",
            "character special file",
            " Inode: 7 ",
            "Links: 1\n",
            "Device type: 8,1\n",
            "Access: (0640/crw-r-----)  Uid: 1000  Gid: 100\n",
            "Access: 1970-01-01 00:00:00.000000000 UTC\n",
            "Modify: 1969-12-31 23:59:59.999999999 UTC\n",
            "Change: 1970-01-01 00:00:01.000000000 UTC\n",
            "I/O unit: none\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        let j = stat_json(&a);
        assert_eq!(j["type"], "character special file");
        assert_eq!(j["rdev"], a.rdev);
        assert_eq!(j["mtime_ns"], -1);
        assert!(
            long_line("sda1", &a)
                .starts_with("crw-r-----   1  1000   100            0 1969-12-31 23:59:59 sda1")
        );
    }
}
