#!/usr/bin/env python3
# Reads `perf script` (call graphs by frame pointer) on stdin and prints, for the samples of
# threads named ARGV[1] whose stack holds a frame matching ARGV[2], the share of those
# samples under each chain of frames from that frame down (ARGV[3] frames deep, default 4),
# with the total sample counts.
import sys, re, collections
comm, root, depth = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 4
chains = collections.Counter(); total = hits = 0
def clean(f):
    f = re.sub(r"\+0x[0-9a-f]+$", "", f)
    f = re.sub(r"::h[0-9a-f]{16}$", "", f)
    return re.sub(r"<[^<>]*>", "<>", re.sub(r"<[^<>]*>", "<>", f))[:90]
def flush(head, frames):
    global total, hits
    if head is None or not head.startswith(comm):
        return
    total += 1
    for k, f in enumerate(frames):
        if root in f:
            hits += 1
            chains[" <- ".join(reversed([clean(x) for x in frames[max(0, k - depth + 1):k + 1]]))] += 1
            return
head, frames = None, []
for line in sys.stdin:
    if not line.strip():
        flush(head, frames); head, frames = None, []
    elif not line[0].isspace():
        head, frames = line.strip(), []
    else:
        parts = line.split(None, 1)
        if len(parts) == 2:
            frames.append(parts[1].rsplit(" (", 1)[0].strip())
flush(head, frames)
print(f"{comm}: {total} samples, {hits} under {root} ({100 * hits / max(total, 1):.2f}%)")
for chain, n in chains.most_common(40):
    print(f"{100 * n / max(hits, 1):6.2f}% {chain}")
