#!/usr/bin/env bash
# A PeakFS cluster on one machine (§IV setup): a master, N servers and a command run as the
# client side, then everything is torn down (trap on EXIT, every wait bounded).
#
#   ci/peakfs-cluster.sh [--netns] [--servers N] [--clients N] [--release] -- CMD...
#
# Without --netns everything runs on 127.0.0.1. With --netns (root) the master, each server
# and each of the N client hosts get their own network namespace (pfs-m, pfs-sI, pfs-cI),
# joined by veth pairs to the bridge pfs-br0 in the root namespace, addresses 10.77.0.x/24:
# a real multi-host cluster whose traffic crosses veth + bridge. CMD runs in client namespace
# pfs-c0 and sees:
#   PEAKFS_MASTER   the master address
#   PEAKFS          the peakfs client binary
#   PEAKFS_SPAWN    a `peakfs bench --spawn-prefix` value ("ip netns exec pfs-c0;ip netns
#                   exec pfs-c1;...": worker r starts in client namespace pfs-c(r mod N);
#                   empty without --netns)
# Default CMD: `peakfs bench --procs 4 --files 500 --ior-mib 8`, spread over the clients.
# Servers run PEAKFS_SERVER_WORKERS workers each (default: the host's cores shared out among the
# servers, at least one: RingSched's workers poll and want cores of their own, and on a host
# with fewer cores than workers every hop between two workers waits for a turn on a core; 2
# servers on a 2-core host get 1 worker each), unpinned unless PEAKFS_PIN is set:
# empty (`PEAKFS_PIN= ci/peakfs-cluster.sh ...`) pins worker w of every server to core w;
# `split` gives server i its own cores (i*W .. i*W+W-1, W workers each; numbers past the
# host's last core wrap around, so on a small host the servers' workers share cores evenly
# instead of going unpinned), polling PEAKFS_SPIN_US
# (the server's default) microseconds before they sleep, with a data file of
# PEAKFS_DATA_MIB (1024) MiB each on /dev/shm, reached through PEAKFS_BACKEND (the server's
# default, uring) by PEAKFS_CONTROLLER_WORKERS (1) file-controller threads. CMD inherits the
# environment: PEAKFS_REPLY_POLL_US makes the peakfs client tools poll for each reply that
# long before they sleep (for client processes with cores of their own). PEAKFS_KEEP_LOGS=DIR
# keeps the master's and servers' logs there (RUST_LOG=info: each worker's counters at exit).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NETNS=0
SERVERS=2
CLIENTS=1
PROFILE=debug
while (($#)); do
  case "$1" in
    --netns) NETNS=1 ;;
    --servers) SERVERS=$2; shift ;;
    --clients) CLIENTS=$2; shift ;;
    --release) PROFILE=release ;;
    --) shift; break ;;
    *) echo "peakfs-cluster: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
((SERVERS >= 1 && SERVERS <= 100 && CLIENTS >= 1 && CLIENTS <= 100)) \
  || { echo "peakfs-cluster: --servers/--clients must be 1..100" >&2; exit 2; }

BIN=${PEAKFS_BIN_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/$PROFILE}
if [[ -z "${PEAKFS_BIN_DIR:-}" ]]; then
  flag=(); [[ $PROFILE == release ]] && flag=(--release)
  cargo build -q -j2 "${flag[@]}" -p peakfs --bin peakfs --bin peakfs-master \
    --bin peakfs-server --manifest-path "$ROOT/Cargo.toml"
fi

WORK=$(mktemp -d /dev/shm/peakfs-cluster.XXXXXX)
PIDS=()
NSES=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  for ns in "${NSES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  if ((NETNS)); then ip link del pfs-br0 2>/dev/null || true; fi
  if ((rc != 0)); then
    for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "--- $f"; tail -5 "$f"; }; done >&2
  fi
  if [[ -n ${PEAKFS_KEEP_LOGS:-} ]]; then mkdir -p "$PEAKFS_KEEP_LOGS" && cp "$WORK"/*.log "$PEAKFS_KEEP_LOGS"/ 2>/dev/null || true; fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_in NS CMD...: CMD in namespace NS (or here without --netns).
run_in() {
  local ns=$1; shift
  if ((NETNS)); then ip netns exec "$ns" "$@"; else "$@"; fi
}
# run_bg NS OUT ERR CMD...: CMD in the background in namespace NS, its pid (the command
# itself, not a subshell: `ip netns exec` execs it) added to PIDS.
run_bg() {
  local ns=$1 out=$2 err=$3; shift 3
  if ((NETNS)); then ip netns exec "$ns" "$@" >"$out" 2>"$err" &
  else "$@" >"$out" 2>"$err" & fi
  PIDS+=($!)
}
HOST=1
# host NS: creates namespace NS with address 10.77.0.HOST on the bridge; sets IP to it.
# (Not called in $(...): NSES and HOST must change in this shell.)
host() {
  local ns=$1
  IP=10.77.0.$HOST
  HOST=$((HOST + 1))
  NSES+=("$ns")
  ip netns add "$ns"
  ip link add "v-$ns" type veth peer name eth0 netns "$ns"
  ip link set "v-$ns" master pfs-br0 up
  ip -n "$ns" addr add "$IP/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}
# wait_line FILE [SECONDS]: the address of the first "listening on ADDR" line of FILE (10 s
# at most unless SECONDS says otherwise).
wait_line() {
  for _ in $(seq $((${2:-10} * 20))); do
    local l
    l=$(grep -m1 'listening on' "$1" 2>/dev/null || true)
    [[ -n "$l" ]] && { echo "${l##* }"; return 0; }
    sleep 0.05
  done
  echo "peakfs-cluster: no 'listening on' in $1" >&2
  return 1
}

if ((NETNS)); then
  [[ $(id -u) == 0 ]] || { echo "peakfs-cluster: --netns needs root" >&2; exit 2; }
  ip link add pfs-br0 type bridge
  ip link set pfs-br0 up
  host pfs-m
  MLISTEN=$IP:7300
else
  MLISTEN=127.0.0.1:0
fi

run_bg pfs-m "$WORK/master.out" "$WORK/master.log" "$BIN/peakfs-master" --listen "$MLISTEN" \
  --servers "$SERVERS" --report-interval-ms 200
MASTER=$(wait_line "$WORK/master.out")

W=${PEAKFS_SERVER_WORKERS:-$(($(nproc) / SERVERS > 1 ? $(nproc) / SERVERS : 1))}
for ((i = 0; i < SERVERS; i++)); do
  SLISTEN=127.0.0.1:0
  if ((NETNS)); then host "pfs-s$i"; SLISTEN=$IP:7400; fi
  case "${PEAKFS_PIN-unset}" in
    unset) PIN=--no-pin ;;
    split)
      CPUS=
      for ((w = 0; w < W; w++)); do CPUS+="${CPUS:+,}$(((i * W + w) % $(nproc)))"; done
      PIN="--cpus $CPUS" ;;
    *) PIN= ;;
  esac
  # shellcheck disable=SC2086 # PIN is zero, one or two words
  run_bg "pfs-s$i" "$WORK/s$i.out" "$WORK/s$i.log" "$BIN/peakfs-server" --master "$MASTER" \
    --listen "$SLISTEN" --data "$WORK/s$i.data" --data-size $((${PEAKFS_DATA_MIB:-1024} << 20)) --workers "$W" $PIN \
    ${PEAKFS_SPIN_US:+--spin-us "$PEAKFS_SPIN_US"} ${PEAKFS_BACKEND:+--backend "$PEAKFS_BACKEND"} \
    ${PEAKFS_CONTROLLER_WORKERS:+--controller-workers "$PEAKFS_CONTROLLER_WORKERS"}
done
# A server formats (or recovers) its zones before it listens, and the mmap backend maps its
# whole data file first: allow 10 s plus 3 s per GiB of data.
for ((i = 0; i < SERVERS; i++)); do
  wait_line "$WORK/s$i.out" $((10 + 3 * ${PEAKFS_DATA_MIB:-1024} / 1024)) >/dev/null
done

SPAWN=
if ((NETNS)); then
  for ((i = 0; i < CLIENTS; i++)); do
    host "pfs-c$i"
    SPAWN+="${SPAWN:+;}ip netns exec pfs-c$i"
  done
fi
echo "peakfs-cluster: master $MASTER, $SERVERS servers, $CLIENTS client host(s)," \
  "$([[ $NETNS == 1 ]] && echo netns || echo localhost)" >&2

export PEAKFS_MASTER=$MASTER PEAKFS=$BIN/peakfs PEAKFS_SPAWN=$SPAWN
if (($# == 0)); then
  set -- "$BIN/peakfs" --master "$MASTER" bench --procs 4 --files 500 --ior-mib 8 \
    --spawn-prefix "$SPAWN"
fi
rc=0
run_in pfs-c0 timeout "${PEAKFS_CLUSTER_TIMEOUT:-600}" "$@" || rc=$?
exit "$rc"
