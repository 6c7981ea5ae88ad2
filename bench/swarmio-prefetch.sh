#!/usr/bin/env bash
# SwarmIO worker prefetching, A/B in one run on the GPU machine (run 8 of bench/results/README.md).
# Usage: BUNDLE=gpu-bundle bash bench/swarmio-prefetch.sh  (JSON lines into $OUT or /tmp)
set -uo pipefail
here=$(dirname "$0")
source "$here/swarmio-pinning.sh" --functions-only
for i in 1 2 3; do
run --target-miops 40 --units 4 --workers 3 --prefetch-ahead 0
run --target-miops 40 --units 4 --workers 3 --prefetch-ahead 8
run --target-miops 40 --units 4 --workers 3 --prefetch-ahead 16 --fill
run --target-miops 40 --units 4 --workers 3 --prefetch-ahead 0 --fill
done
