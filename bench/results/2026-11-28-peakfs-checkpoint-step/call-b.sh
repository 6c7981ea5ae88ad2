#!/usr/bin/env bash
# Call B: 256 KiB pieces, two on their way (s256, 5059718) against 32 KiB pieces, eight on
# their way, and pieces of 256 KiB once the log since the take passes 256 KiB (adapt),
# alternating ABBA, with call A's runs. Usage: call-b.sh OUT (builds in gpu-run/step/).
BUILDS="s256 adapt" exec bash "$(dirname "$0")/call-a.sh" "$@"
