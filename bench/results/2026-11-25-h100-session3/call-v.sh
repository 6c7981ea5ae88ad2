set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== gofs A/B: old = a14cc81 (checks every read's tag), new = one read in 16 checked"
OUT=${OUT:-/tmp} bash bench/gofs-ab.sh gpu-call/ab/gofs-old gpu-call/ab/gofs-new 3
python3 - ${OUT:-/tmp}/gofs-ab.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r["workload"] in ("randread-4k",): print(r["command"].split()[0].split("/")[-1], r["workload"], round(r["iops"]), [round(v,3) for v in r["extra"]["ratio_rounds"]])
PY
