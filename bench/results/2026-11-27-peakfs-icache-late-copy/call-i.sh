#!/usr/bin/env bash
# Call I: final (a71130d) against keyed (a data write-out stages its pages by zone page and
# each command copies them from the write-out's map when it is sent: no copy into the batch,
# no 64-page chunks per pump; the copying batch path removed): call A's runs with these two
# builds.
exec bash "$(dirname "$0")/call-a.sh" "${1:?}" final keyed gpu-run/stop
