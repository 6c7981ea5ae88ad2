#!/usr/bin/env bash
# callers.sh FILE PATTERN: callgrind callers/callees block of functions matching PATTERN (inclusive)
callgrind_annotate --tree=both --inclusive=yes "$1" 2>/dev/null | awk -v pat="$2" 'BEGIN{RS=""} $0 ~ ("\\*  [^\n]*" pat) {print; print "----"}' | cut -c1-200
