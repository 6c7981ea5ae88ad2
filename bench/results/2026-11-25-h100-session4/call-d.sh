# Call D (run as one command line in the repository root, binaries carried in gpu-run/peakfs-bigdir:
# old = ab8a376, new = 70f20d8, new-poll30 = new with clients polling 30 us for replies,
# new-poll30-spin1000 = also server workers `--spin-us 1000`; see bench/results/2026-11-25-peakfs-devbox-bigdir.md)
date -u; nproc; S=$(date +%s)
OUT=$OUT/layouts ROUNDS=2 LAYOUTS="4x4 4x1s 4x2s" PEAKFS_BACKEND=mmap bash bench/peakfs-bigdir-layouts.sh gpu-run/peakfs-bigdir/old gpu-run/peakfs-bigdir/new 2>&1
echo "took $(( $(date +%s) - S )) s"
OUT=$OUT/poll ROUNDS=2 LAYOUTS="4x4" PEAKFS_BACKEND=mmap timeout $(( 560 - ($(date +%s) - S) )) bash bench/peakfs-bigdir-layouts.sh gpu-run/peakfs-bigdir/new gpu-run/peakfs-bigdir/new-poll30 gpu-run/peakfs-bigdir/new-poll30-spin1000 2>&1
echo "total $(( $(date +%s) - S )) s"
