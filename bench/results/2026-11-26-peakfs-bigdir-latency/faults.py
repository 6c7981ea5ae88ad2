#!/usr/bin/env python3
# The cost of a first-touch page fault on this machine: maps fresh anonymous memory and
# writes one byte per 4 KiB page, three times each for fresh and for touched memory.
import mmap, time
def touch(m, n):
    t = time.perf_counter()
    for off in range(0, n, 4096):
        m[off] = 1
    return time.perf_counter() - t
n = 256 << 20
for rnd in range(3):
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_NOHUGEPAGE)
    first = touch(m, n); again = touch(m, n)
    pages = n // 4096
    print(f"round {rnd}: fresh {first/pages*1e6:.2f} us/page, touched {again/pages*1e6:.2f} us/page ({pages} pages)")
    m.close()
for f in ["/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/mm/transparent_hugepage/defrag",
          "/sys/devices/system/cpu/cpuidle/current_driver", "/sys/devices/system/cpu/cpuidle/current_governor",
          "/proc/cmdline", "/sys/devices/system/cpu/vulnerabilities/spectre_v2", "/sys/devices/system/cpu/vulnerabilities/retbleed"]:
    try:
        print(f, "=", open(f).read().strip())
    except OSError as e:
        print(f, "unreadable:", e)
