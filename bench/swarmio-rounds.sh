#!/usr/bin/env bash
# SwarmIO session 3, second call: one staged batch per worker round (completions posted between
# batches) and no locked instruction in the mailbox check (swarmio-round) against swarmio-after.
set -uo pipefail
source bench/swarmio-pinning.sh --functions-only
B=gpu-bundle/bin
ab() { for v in after round; do sw=$B/swarmio-$v; printf '%-7s' "$v"; run "$@"; done; }
nproc
for i in 1 2; do
ab --target-miops 40 --units 4 --workers 3
ab --target-miops 40 --units 3 --workers 4
ab --target-miops 40 --units 2 --workers 7
done
ab --target-miops 40 --units 3 --workers 4 --fill
ab --target-miops 200 --units 4 --workers 3
ab --target-miops 200 --units 3 --workers 4
ab --target-miops 30 --units 3 --workers 4
