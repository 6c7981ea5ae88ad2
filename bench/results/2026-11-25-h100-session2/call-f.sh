set -u
O=${OUT:-/tmp}
mkdir -p /tmp/p && tar -C /tmp/p -xJf gpu-call/perf.tar.xz
perf() { LD_LIBRARY_PATH=/tmp/p/perfpkg/lib /tmp/p/perfpkg/perf "$@"; }
perf record -e cpu-clock -F 5000 -o /tmp/gofs.data -- gpu-call/gofs-sym bench --image /dev/shm/p.img --image-mib 1024 \
  --files 500 --seconds 5 --json > $O/gofs-prof.jsonl 2>/dev/null
rm -f /dev/shm/p.img
python3 - $O/gofs-prof.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if "read-4" in r["workload"]: print(r["system"], r["workload"], round(r["iops"]), r["extra"].get("ratio_to_raw"), r["latency_us"])
PY
perf report -i /tmp/gofs.data --no-children --sort comm,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -70 > $O/perf-gofs.txt
cat $O/perf-gofs.txt
perf annotate -i /tmp/gofs.data --stdio -s gpu_nvme::queue::HostQueuePair::wait 2>/dev/null | grep -E "^\s+[0-9]+\.[0-9]+" | sort -rn | head -15
