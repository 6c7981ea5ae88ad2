#!/usr/bin/env python3
# sample.py OUT: every 10 ms, per thread of peakfs processes: (t, pid, tid, comm, proc, runtime_ns, vcsw, ivcsw)
import os, sys, time
out = open(sys.argv[1], "w")
def procs():
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            cmd = open(f"/proc/{p}/cmdline","rb").read().split(b"\0")
        except OSError: continue
        if not cmd or not cmd[0]: continue
        exe = os.path.basename(cmd[0].decode(errors="replace"))
        if exe in ("peakfs-server","peakfs-master") or (exe=="peakfs" and b"bench-worker" in cmd):
            yield p, exe
stop = time.time() + float(sys.argv[2]) if len(sys.argv) > 2 else 1e18
while time.time() < stop:
    t = time.time()
    for p, exe in list(procs()):
        try: tids = os.listdir(f"/proc/{p}/task")
        except OSError: continue
        for tid in tids:
            try:
                rt = open(f"/proc/{p}/task/{tid}/schedstat").read().split()[0]
                comm = open(f"/proc/{p}/task/{tid}/comm").read().strip()
                st = open(f"/proc/{p}/task/{tid}/status").read()
                v = st.split("voluntary_ctxt_switches:")[1].split()[0]
                iv = st.split("nonvoluntary_ctxt_switches:")[1].split()[0]
            except (OSError, IndexError): continue
            out.write(f"{t:.4f} {p} {tid} {comm.replace(' ','_')} {exe} {rt} {v} {iv}\n")
    out.flush()
    time.sleep(0.01)
