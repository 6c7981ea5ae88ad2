#!/usr/bin/env python3
"""Pins every running peakfs-server's file-controller threads (nvme-worker-K) to the core of
its K-th worker (the K-th core of the server's --cpus list), checking every 20 ms until the
file named by argv[1] is gone. An experiment done from outside, with no change to the server."""
import os, sys, time

def cpu_list(s):
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out

done = set()
while os.path.exists(sys.argv[1]):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if not args[0].endswith(b"peakfs-server") or b"--cpus" not in args:
                continue
            cores = cpu_list(args[args.index(b"--cpus") + 1].decode())
            for tid in os.listdir(f"/proc/{pid}/task"):
                if tid in done:
                    continue
                comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
                if comm.startswith("nvme-worker-"):
                    k = int(comm.rsplit("-", 1)[1])
                    os.sched_setaffinity(int(tid), {cores[k % len(cores)]})
                    done.add(tid)
        except (OSError, ValueError, IndexError):
            pass
    time.sleep(0.02)
print(f"pinned {len(done)} controller threads", file=sys.stderr)
