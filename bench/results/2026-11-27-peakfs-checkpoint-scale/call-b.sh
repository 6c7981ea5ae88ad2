#!/usr/bin/env bash
# Call B: checkpoints written between requests. new (d7a2d7c, the end of call A) against steps
# (005297f). Usage: call-b.sh OUT
exec bash "$(dirname "$0")/call-a.sh" "${1:?}" new steps
