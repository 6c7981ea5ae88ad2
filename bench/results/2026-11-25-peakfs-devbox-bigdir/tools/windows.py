#!/usr/bin/env python3
# windows.py LOG: "phase start end ops" lines (epoch seconds) from the bench log
import sys, re, datetime
ansi = re.compile(r"\x1b\[[0-9;]*m")
for l in open(sys.argv[1]):
    l = ansi.sub("", l)
    m = re.search(r"^(\S+).*phase=(\S+) ops=(\d+) wall=(\S+)", l)
    if not m: continue
    end = datetime.datetime.fromisoformat(m.group(1).replace("Z","+00:00")).timestamp()
    w = m.group(4)
    wall = float(w[:-2])/1e3 if w.endswith("ms") else float(w[:-2])/1e6 if w.endswith("µs") else float(w[:-1])
    print(m.group(2), f"{end-wall+0.02:.6f}", f"{end-0.02:.6f}", m.group(3))
