#!/usr/bin/env bash
# Where the host threads' time goes on the GPU machine: Debian's perf (carried as
# gpu-run/perf.tar.xz with its libraries, sampling the cpu-clock software event) over a
# SwarmIO GPU run at 40 MIOPS and over GoFS's 4 KiB random reads.
# Usage: BIN=gpu-run/bin bash bench/profile-host.sh   (reports into $OUT or /tmp)
set -u
B=${BIN:-gpu-run/bin}; O=${OUT:-/tmp}
mkdir -p /tmp/p && tar -C /tmp/p -xJf gpu-run/perf.tar.xz
perf() { LD_LIBRARY_PATH=/tmp/p/perfpkg/lib /tmp/p/perfpkg/perf "$@"; }
perf --version || exit 0
perf record -e cpu-clock -F 2000 -g -o /tmp/sw.data -- $B/swarmio bench --initiator gpu --block-size 512 \
  --threads 65536 --queues 256 --queue-depth 256 --duration 3 --target-miops 40 --units 4 --workers 3 2>&1 | tail -2
perf report -i /tmp/sw.data --no-children --sort comm,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -60 > $O/perf-swarmio.txt
head -45 $O/perf-swarmio.txt
perf record -e cpu-clock -F 2000 -g -o /tmp/gofs.data -- $B/gofs bench --image /dev/shm/p.img --image-mib 1024 \
  --files 1000 --seconds 3 2>&1 | grep "GoFS at"
rm -f /dev/shm/p.img
perf report -i /tmp/gofs.data --no-children --sort comm,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -50 > $O/perf-gofs.txt
head -30 $O/perf-gofs.txt
