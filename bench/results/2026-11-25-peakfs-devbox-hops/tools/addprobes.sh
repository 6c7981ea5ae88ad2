#!/usr/bin/env bash
# addprobes.sh BIN: uprobes on Zone::write, Zone::read, PStore::checkpoint, Icache::write_back_all
B=$1
perf probe -d 'probe_peakfs*:*' >/dev/null 2>&1
delta=$(readelf -lW $B | awk '$1=="LOAD" && /R E/ {print $3, $2}' | { read v o; echo $((v - o)); })
for pair in "zcall:_ZN6peakfs6pstore4zone4Zone9pipelined17h" "zread:_ZN6peakfs6pstore4zone4Zone4read17h" "ckpt:_ZN6peakfs6pstore6PStore10checkpoint17h" "wback:write_back_all"; do
  name=${pair%%:*}; pat=${pair#*:}
  addr=$(nm $B | grep "$pat" | grep -v "closure" | head -1 | awk '{print $1}')
  [ -z "$addr" ] && { echo "no $name"; continue; }
  off=$(printf "0x%x" $((0x$addr - delta)))
  perf probe -x $B --add "$name=$off" >/dev/null 2>&1 || echo "probe $name failed"
done
perf probe -l
