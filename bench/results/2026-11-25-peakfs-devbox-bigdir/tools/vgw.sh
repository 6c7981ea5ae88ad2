#!/bin/bash
# a bench worker under callgrind, as a child (not exec) so that the driver's SIGKILL leaves it to exit at stdin EOF
valgrind -q --tool=callgrind --callgrind-out-file=${CG_OUT:-/tmp/p/cg}.client.%p "$@"
