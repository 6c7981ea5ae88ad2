#!/usr/bin/env bash
# Call D: base (d70ef82) against work (call C's drain, and pieces bounded by work as well as
# bytes), the runs of call C. Usage: call-d.sh OUT
B=work exec bash bench/results/2026-11-27-peakfs-layouts/call-c.sh "$@"
