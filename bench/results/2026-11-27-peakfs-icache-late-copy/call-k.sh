#!/usr/bin/env bash
# Call K: call J again on another host, with the paper's stride (every stat and remove takes
# the files of the next process): base2 (47bf33f) against flush.
EXTRA="--stride 1" exec bash "$(dirname "$0")/call-a.sh" "${1:?}" base2 flush gpu-run/stop
