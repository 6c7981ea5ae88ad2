#!/usr/bin/env bash
# Call A: three builds, rounds rotating their order.
#   base  = a29724f;
#   lean  = base + the client's reply handed straight to its waiting call, one open file per
#           inode kept without an allocation, inline CRC-32C for short inputs;
#   flush = lean + RingSched sends a reply before the request's deferred log work and before
#           any other request's work in the same round.
# 4 x 2 and 8 x 1 empty-file phases, 3,901-byte files, IOR (mmap backend).
set -u
O=${1:?}; nproc; date -u
S=bench/results/2026-11-26-peakfs-data-path/summary.py
md() { # build round cluster workers tag only...
  local b=$1 i=$2 c=$3 w=$4 t=$5; shift 5
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 "$@" --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  python3 $S $f.jsonl "$t $b $i"
}
order() { case $(( $1 % 3 )) in 0) echo base lean flush;; 1) echo flush base lean;; 2) echo lean flush base;; esac; }
EMPTY=(--only create-empty --only stat-empty --only remove-empty)
for i in $(seq 1 10); do for b in $(order $i); do md $b $i 4 2 e4x2 "${EMPTY[@]}"; done; done > $O/e4x2.txt
for i in $(seq 1 6); do for b in $(order $i); do md $b $i 8 1 e8x1 "${EMPTY[@]}"; done; done > $O/e8x1.txt
for i in 1 2 3 4; do if (( i % 2 )); then bs="base flush"; else bs="flush base"; fi
  for b in $bs; do md $b $i 4 2 s4x2 --only create-3901 --only stat-3901 --only remove-3901; done; done > $O/s4x2.txt
ior() { # build round
  timeout 150 gpu-run/$1/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --only xfer-write --only xfer-read --only ior-nn-write --only ior-nn-read --only ior-n1-write --only ior-n1-read --json > $O/ior-$1-$2.jsonl 2> $O/ior-$1-$2.err || { echo FAILED; tail -3 $O/ior-$1-$2.err; }
  python3 $S $O/ior-$1-$2.jsonl "ior $1 $2"
}
{ ior base 1; ior flush 1; ior flush 2; ior base 2; } > $O/ior.txt
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
{ for t in e4x2 e8x1; do for p in "base lean" "base flush" "lean flush"; do echo "== $t: $p"; python3 $AB "$O/$t-*.jsonl" $p; done; done
  echo "== s4x2: base flush"; python3 $AB "$O/s4x2-*.jsonl" base flush
  echo "== IOR: base flush"; python3 bench/results/2026-11-26-peakfs-doorbell-bell/ior_ab.py "$O/ior-*.jsonl" base flush; } > $O/summary.txt
for b in base lean flush; do
  echo "== $b: worker stopped lines (4 x 2)"
  grep -h "worker stopped" $O/logs-e4x2-$b-*/s*.log | sed -E 's/.*(worker=[0-9]+).*(requests=[0-9]+) (forwarded=[0-9]+).*(hop_queued_us="[^"]*") (hop_served_us="[^"]*") (hop_us="[^"]*").*/\1 \2 \3 \4 \5 \6/'
done > $O/hop-lines.txt
python3 bench/results/2026-11-26-peakfs-reply-poll/hops.py $O/hop-lines.txt >> $O/summary.txt
cat $O/summary.txt; grep -c FAILED $O/*.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
