#!/usr/bin/env bash
# Call J: keyed (47bf33f, here base2) against flush (a server's poller sends each
# connection's replies right after serving its frames, not once all ready connections of
# the round were served): call A's runs with these two builds.
exec bash "$(dirname "$0")/call-a.sh" "${1:?}" base2 flush gpu-run/stop
