#!/usr/bin/env python3
# who.py FILE PATTERN [N]: callers of functions matching PATTERN, by inclusive cost (callgrind_annotate --tree=caller)
import sys, subprocess, re
out = subprocess.run(["callgrind_annotate","--tree=caller","--inclusive=yes",sys.argv[1]],capture_output=True,text=True).stdout
n = int(sys.argv[3]) if len(sys.argv)>3 else 10
clean = lambda s: re.sub(r"/rustc/[0-9a-f]+/library/|/work/main/crates/|\[/work/peakfs-bin/[^]]*\]|/root/.cargo/registry/src/index.crates.io-[0-9a-f]+/", "", s)
for block in out.split("\n\n"):
    lines = block.strip().split("\n")
    star = [l for l in lines if "*  " in l]
    if not star or not re.search(sys.argv[2], star[0]): continue
    print(clean(star[0])[:180])
    callers = [l for l in lines if " < " in l]
    callers.sort(key=lambda l: -int(l.split("(")[0].replace(",","").strip() or 0))
    for l in callers[:n]: print("   ", clean(l)[:180])
