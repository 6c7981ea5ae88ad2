#!/usr/bin/env python3
# Sums the workers' stop lines of one run: stops.py LOGDIR
# (frames, busy time per frame, log work, minor page faults, voluntary and involuntary
# context switches; with the most faults and preemptions of one worker).
import glob, re, sys
tot = {}; most = {}
for f in glob.glob(sys.argv[1] + "/s*.log"):
    for line in open(f, errors="replace"):
        line = re.sub(r"\x1b\[[0-9;]*m", "", line)
        if "worker stopped" not in line:
            continue
        for k, v in re.findall(r"(\w+)=([0-9.]+)", line):
            v = float(v); tot[k] = tot.get(k, 0) + v; most[k] = max(most.get(k, 0), v)
fr = tot.get("frames", 0)
if fr:
    print(f'  workers: frames {fr:.0f} busy {tot["busy_ms"]:.1f} ms ({tot["busy_ms"]*1e3/fr:.2f} us/frame) '
          f'log {tot["log_work_ms"]:.1f} ms | faults {tot["minor_faults"]:.0f} (max {most["minor_faults"]:.0f}) '
          f'switches {tot["voluntary_switches"]:.0f} preempted {tot["involuntary_switches"]:.0f} (max {most["involuntary_switches"]:.0f})')
