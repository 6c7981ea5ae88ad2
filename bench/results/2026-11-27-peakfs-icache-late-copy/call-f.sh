#!/usr/bin/env bash
# Call F: the whole stop, base (4855df3, the landed head) against final (a71130d: the late
# copy, the presized inode table, --stride): call A's runs with these two builds.
exec bash "$(dirname "$0")/call-a.sh" "${1:?}" base final gpu-run/stop
