#!/usr/bin/env bash
# Call C: cow (0ad40de) against presize (the inode table and the Icache index sized when a
# store opens, so that they never grow, and rehash, while serving): call A's runs with these
# two builds.
exec bash "$(dirname "$0")/call-a.sh" "${1:?}" cow presize
