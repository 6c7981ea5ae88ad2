#!/usr/bin/env python3
"""Why the bigdir phases stay below 0.90 of echo-sync on 16 cores: a closed queueing model.

P client processes each keep one request in flight. A request spends Z us away from the
server thread (the client's socket calls, the loopback, the reply's wake-up) and S us on it.
With echo-sync every process has a server thread of its own, so nothing queues and each
process makes 1 / (Z + S_echo) requests per us. In a bigdir each request goes to the thread
its name hashes to, one of T at random, and waits there behind the requests of other
processes that hashed to the same thread. Exact mean-value analysis (MVA) of that closed
network gives the throughput; the fraction is of echo-sync's.

Inputs are the README's measured numbers: 8 processes at about 430 K echo-sync requests/s
(18.6 us per request per process), a server thread holding an echo about 6 us and a create
8-9.5 us (worker stop lines: busy time / frames).

Usage: queue_model.py [PROCS THREADS CYCLE_US S_ECHO_US]
"""
import sys


def mva(procs: int, threads: int, service: float, think: float) -> float:
    """Requests per us of `procs` processes over `threads` equally likely threads."""
    queue = 0.0  # mean requests at one thread
    rate = 0.0
    for n in range(1, procs + 1):
        residence = service * (1 + queue)  # at the thread picked, behind those queued
        rate = n / (think + residence)
        queue = rate / threads * residence
    return rate


def main() -> None:
    procs, threads, cycle, s_echo = (
        int(sys.argv[1]) if len(sys.argv) > 1 else 8,
        int(sys.argv[2]) if len(sys.argv) > 2 else 8,
        float(sys.argv[3]) if len(sys.argv) > 3 else 18.6,
        float(sys.argv[4]) if len(sys.argv) > 4 else 6.0,
    )
    think = cycle - s_echo
    sync = procs / cycle
    print(f"{procs} processes, {threads} threads, Z = {think:.1f} us, echo-sync "
          f"{sync * 1e6 / 1e3:.0f} K/s")
    print("service S (us) | spread over threads, fraction of echo-sync")
    for s in (3.0, 4.0, 5.0, s_echo, 7.0, 8.0, 8.5, 9.5):
        print(f"{s:14.1f} | {mva(procs, threads, s, think) / sync:.3f}")


if __name__ == "__main__":
    main()
