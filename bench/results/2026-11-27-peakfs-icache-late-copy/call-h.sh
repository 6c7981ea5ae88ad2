#!/usr/bin/env bash
# Call H: final (a71130d) against prefault (the log's buffer with room for the whole log and
# its first 8 MiB mapped, and the inode table's pages mapped, when a store opens): call A's
# runs with these two builds.
exec bash "$(dirname "$0")/call-a.sh" "${1:?}" final prefault gpu-run/stop
