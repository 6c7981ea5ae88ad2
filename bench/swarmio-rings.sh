#!/usr/bin/env bash
# SwarmIO session 3: batched dispatcher->worker ring transfers, per-batch stats, write-intent
# prefetch of the host buffers, A/B in one run on the GPU machine.
# Binaries (bundle profile): swarmio-before = main before the change; swarmio-mid = batched
# rings + local stats + no-division SQ fetch; swarmio-after = mid + prefetchw on read buffers.
# Usage: BUNDLE=gpu-bundle bash bench/swarmio-rings.sh   (JSON lines into $OUT or /tmp)
set -uo pipefail
here=$(dirname "$0")
source "$here/swarmio-pinning.sh" --functions-only
B=${BUNDLE:-gpu-bundle}/bin
ab() { for v in before mid after; do sw=$B/swarmio-$v; printf '%-7s' "$v"; run "$@"; done; }
one() { sw=$B/swarmio-after; printf '%-7s' after; run "$@"; }
nproc; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== dispatcher ceiling (no data moved)"
ab --target-miops 200 --units 2 --workers 6 --null
echo "== 40 MIOPS target, 4 units x 3 workers, twice"
ab --target-miops 40 --units 4 --workers 3
ab --target-miops 40 --units 4 --workers 3
echo "== 40 MIOPS target, other shapes"
one --target-miops 40 --units 2 --workers 7
one --target-miops 40 --units 3 --workers 4
one --target-miops 40 --units 2 --workers 6
echo "== filled namespace (every read copies data)"
ab --target-miops 40 --units 4 --workers 3 --fill
echo "== most sustained"
one --target-miops 200 --units 4 --workers 3
one --target-miops 200 --units 2 --workers 7
one --target-miops 200 --units 3 --workers 4
echo "== lower targets"
for t in 5 10 20 30; do one --target-miops $t --units 4 --workers 3; done
