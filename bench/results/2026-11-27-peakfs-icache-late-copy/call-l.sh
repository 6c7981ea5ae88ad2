#!/usr/bin/env bash
# Call L: base2 against flush once more, 12 rounds of 8 x 1 with empty files (stride 0), on
# call K's host.
E8=12 S8=0 E4=0 exec bash "$(dirname "$0")/call-a.sh" "${1:?}" base2 flush gpu-run/stop
