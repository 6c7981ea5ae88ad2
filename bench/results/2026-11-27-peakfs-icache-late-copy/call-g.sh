#!/usr/bin/env bash
# Call G (diagnostic build diag2: final a71130d + callb-diag.patch, not committed): call B's
# runs on the final code, to see what the longest log work is made of now.
exec bash "$(dirname "$0")/call-b.sh" "${1:?}" gpu-run/diag2
