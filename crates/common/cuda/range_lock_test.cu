// GPU checks of cuda/range_lock.cuh (GoFS §3.3 range lock).
//
// Every check kernel adds to `counts` (2 x unsigned long long, zeroed by the host):
// counts[0] = checks passed, counts[1] = checks failed. The host expects counts[1] == 0 and
// counts[0] > 0. Each check kernel needs a lock freshly set up by range_lock_test_init; the
// stress kernels also need `owners` (units x unsigned int) and `last_grant`
// (units x unsigned long long) zeroed.
//
// Launch contracts:
// - range_lock_test_init(header, slots, capacity): any grid and block; capacity a power of two
//   in [1, RANGE_LOCK_MAX_CAPACITY]. Must finish before the lock is used.
// - range_lock_test_semantics(header, slots, counts): grid 1, block 64, on a lock of capacity 64.
//   Deterministic script: invalid ranges, try refusals, FIFO against an older waiter (warp 1
//   waits while warp 0 probes), a warp-wide acquire scanning 40+ older slots, and a full ring.
// - range_lock_test_block_stress(header, slots, owners, last_grant, units, iterations, seed,
//   counts): any grid (e.g. 4 x SM count), block a multiple of 32 up to 1024, any capacity;
//   units >= 1. Thread 0 of each block acquires a random range of at most 16 units, the block
//   claims every unit of it in `owners` with atomicExch (a non-zero previous owner is a
//   violation) and checks in `last_grant` that overlapping grants come in ticket order. One
//   check per grant: passed when none of its units failed.
// - range_lock_test_warp_stress(same arguments): same grid/block rules; each warp acquires with
//   range_lock_acquire_warp and its lanes check the units.
// - range_lock_test_try_stress(same arguments): as block stress, but thread 0 alternates blocking
//   acquires and range_lock_try_acquire; refused tries are not checks, granted ones are.

#include "range_lock.cuh"

#define RANGE_LOCK_TEST_MAX_LEN 16u

__device__ __forceinline__ void range_lock_test_count(unsigned long long* counts, bool passed) {
    atomicAdd(&counts[passed ? 0 : 1], 1ULL);
}

__device__ __forceinline__ unsigned long long range_lock_test_next(unsigned long long* rng) {
    // xorshift64*: cheap, and deterministic per seed so a failing run can be replayed.
    *rng ^= *rng >> 12;
    *rng ^= *rng << 25;
    *rng ^= *rng >> 27;
    return *rng * 0x2545F4914F6CDD1DULL;
}

__device__ __forceinline__ void range_lock_test_pick(unsigned long long* rng, unsigned int units,
                                                     unsigned long long* offset,
                                                     unsigned long long* len) {
    *offset = range_lock_test_next(rng) % units;
    unsigned long long room = units - *offset;
    unsigned long long longest = room < RANGE_LOCK_TEST_MAX_LEN ? room : RANGE_LOCK_TEST_MAX_LEN;
    *len = 1 + range_lock_test_next(rng) % longest;
}

// Claims units [offset, offset + len) for `owner`, strided over `lanes` threads; returns the
// number of failed checks (a unit already owned, or granted out of ticket order).
__device__ __forceinline__ unsigned long long range_lock_test_claim(
    unsigned int* owners, unsigned long long* last_grant, unsigned long long offset,
    unsigned long long len, unsigned long long ticket, unsigned int owner, unsigned int lane,
    unsigned int lanes) {
    unsigned long long failed = 0;
    for (unsigned long long unit = offset + lane; unit < offset + len; unit += lanes) {
        if (atomicExch(&owners[unit], owner) != 0) ++failed;
        if (atomicExch(&last_grant[unit], ticket + 1) > ticket) ++failed;
    }
    return failed;
}

__device__ __forceinline__ unsigned long long range_lock_test_unclaim(
    unsigned int* owners, unsigned long long offset, unsigned long long len, unsigned int owner,
    unsigned int lane, unsigned int lanes) {
    unsigned long long failed = 0;
    for (unsigned long long unit = offset + lane; unit < offset + len; unit += lanes) {
        if (atomicExch(&owners[unit], 0u) != owner) ++failed;
    }
    return failed;
}

extern "C" __global__ void range_lock_test_init(RangeLockHeader* header, RangeSlot* slots,
                                                unsigned long long capacity) {
    unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    if (first == 0) range_lock_init_header(header, capacity);
    for (unsigned long long index = first; index < capacity; index += stride) {
        range_lock_init_slot(slots, index);
    }
}

extern "C" __global__ void range_lock_test_semantics(RangeLockHeader* header, RangeSlot* slots,
                                                     unsigned long long* counts) {
    const unsigned int tid = threadIdx.x;
    unsigned long long ticket = 0;

    // Invalid ranges draw no ticket; a refused try leaves its slot vacant for the next lap.
    if (tid == 0) {
        range_lock_test_count(counts, range_lock_acquire(header, slots, 5, 0) ==
                                          RANGE_LOCK_INVALID_TICKET);
        range_lock_test_count(counts, range_lock_acquire(header, slots, ~0ULL, 1) ==
                                          RANGE_LOCK_INVALID_TICKET);
        range_lock_test_count(counts, !range_lock_try_acquire(header, slots, 1, 0, &ticket));
        range_lock_test_count(counts, range_lock_load(&header->tail) == 0);

        unsigned long long first = range_lock_acquire(header, slots, 0, 10);
        range_lock_test_count(counts, first == 0);
        range_lock_test_count(counts, range_lock_load(&slots[0].state) ==
                                          range_lock_slot_state(0, RANGE_LOCK_PHASE_HELD));
        range_lock_test_count(counts, !range_lock_try_acquire(header, slots, 5, 10, &ticket));
        range_lock_test_count(counts, range_lock_load(&slots[1].state) ==
                                          range_lock_slot_state(1 + 64, RANGE_LOCK_PHASE_VACANT));
        range_lock_test_count(counts, range_lock_try_acquire(header, slots, 10, 10, &ticket));
        range_lock_test_count(counts, ticket == 2);
        range_lock_release(header, slots, ticket);
        range_lock_release(header, slots, first);
        range_lock_test_count(counts, range_lock_load(&header->head) == 3 &&
                                          range_lock_load(&header->tail) == 3);
    }
    __syncthreads();

    // FIFO: warp 1 waits with a large range behind a small held one; a younger try that
    // overlaps only the waiter must be refused.
    __shared__ unsigned long long small_ticket;
    if (tid == 0) small_ticket = range_lock_acquire(header, slots, 0, 10);
    __syncthreads();
    if (tid == 32) {
        unsigned long long large = range_lock_acquire(header, slots, 0, 100);
        range_lock_test_count(counts, large == small_ticket + 1);
        range_lock_release(header, slots, large);
    } else if (tid == 0) {
        unsigned long long waiter = small_ticket + 1;
        while (range_lock_load(&slots[waiter & 63].state) !=
               range_lock_slot_state(waiter, RANGE_LOCK_PHASE_WAITING)) {
            __nanosleep(RANGE_LOCK_MIN_SLEEP_NS);
        }
        range_lock_test_count(counts, !range_lock_try_acquire(header, slots, 50, 10, &ticket));
        bool disjoint = range_lock_try_acquire(header, slots, 100, 10, &ticket);
        range_lock_test_count(counts, disjoint);
        if (disjoint) range_lock_release(header, slots, ticket);
        range_lock_release(header, slots, small_ticket);
    }
    __syncthreads();

    // Warp-wide acquire: 40 held disjoint ranges give the warp two 32-ticket steps to scan.
    __shared__ unsigned long long held[40];
    if (tid == 0) {
        for (unsigned long long i = 0; i < 40; ++i) {
            held[i] = range_lock_acquire(header, slots, i * 10, 5);
        }
    }
    __syncthreads();
    if (tid < 32) {
        unsigned long long expected = held[39] + 1;
        unsigned long long warp_ticket = range_lock_acquire_warp(header, slots, 5, 5);
        range_lock_test_count(counts, warp_ticket == expected);
        if (tid == 0) {
            range_lock_test_count(counts,
                                  !range_lock_try_acquire(header, slots, 0, 1000, &ticket));
            range_lock_release(header, slots, warp_ticket);
            for (int i = 0; i < 40; ++i) range_lock_release(header, slots, held[i]);
            range_lock_test_count(counts,
                                  range_lock_load(&header->head) == range_lock_load(&header->tail));
        }
    }
    __syncthreads();

    // Full ring: the oldest held ticket blocks the slot that the ticket 64 later needs.
    if (tid == 0) {
        unsigned long long oldest = range_lock_acquire(header, slots, 0, 1);
        for (int i = 0; i < 63; ++i) {
            range_lock_release(header, slots, range_lock_acquire(header, slots, 1, 1));
        }
        range_lock_test_count(counts, !range_lock_try_acquire(header, slots, 2, 1, &ticket));
        range_lock_test_count(counts, range_lock_load(&header->tail) == oldest + 64);
        range_lock_release(header, slots, oldest);
        bool after = range_lock_try_acquire(header, slots, 2, 1, &ticket);
        range_lock_test_count(counts, after && ticket == oldest + 64);
        if (after) range_lock_release(header, slots, ticket);
        range_lock_test_count(counts,
                              range_lock_load(&header->head) == range_lock_load(&header->tail));
    }
}

extern "C" __global__ void range_lock_test_block_stress(
    RangeLockHeader* header, RangeSlot* slots, unsigned int* owners,
    unsigned long long* last_grant, unsigned int units, unsigned int iterations,
    unsigned long long seed, unsigned long long* counts) {
    __shared__ unsigned long long ticket, offset, len;
    __shared__ unsigned int iteration_failed;
    unsigned long long rng = (seed ^ (blockIdx.x + 1) * 0x9E3779B97F4A7C15ULL) | 1;
    const unsigned int owner = blockIdx.x + 1;
    unsigned long long passed = 0, failed = 0;
    for (unsigned int i = 0; i < iterations; ++i) {
        if (threadIdx.x == 0) {
            range_lock_test_pick(&rng, units, &offset, &len);
            ticket = range_lock_acquire(header, slots, offset, len);
            iteration_failed = 0;
        }
        __syncthreads();
        unsigned long long bad = range_lock_test_claim(owners, last_grant, offset, len, ticket,
                                                       owner, threadIdx.x, blockDim.x);
        __nanosleep(200);
        __syncthreads();
        bad += range_lock_test_unclaim(owners, offset, len, owner, threadIdx.x, blockDim.x);
        if (bad) iteration_failed = 1;
        __syncthreads();
        if (threadIdx.x == 0) {
            range_lock_release(header, slots, ticket);
            if (iteration_failed) ++failed; else ++passed;
        }
    }
    if (threadIdx.x == 0) {
        atomicAdd(&counts[0], passed);
        atomicAdd(&counts[1], failed);
    }
}

extern "C" __global__ void range_lock_test_warp_stress(
    RangeLockHeader* header, RangeSlot* slots, unsigned int* owners,
    unsigned long long* last_grant, unsigned int units, unsigned int iterations,
    unsigned long long seed, unsigned long long* counts) {
    const unsigned int lane = threadIdx.x & 31;
    const unsigned int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    // Every lane draws the same ranges, so each knows the range without a broadcast.
    unsigned long long rng = (seed ^ (warp + 1) * 0x9E3779B97F4A7C15ULL) | 1;
    unsigned long long passed = 0, failed = 0;
    for (unsigned int i = 0; i < iterations; ++i) {
        unsigned long long offset, len;
        range_lock_test_pick(&rng, units, &offset, &len);
        unsigned long long ticket = range_lock_acquire_warp(header, slots, offset, len);
        unsigned long long bad = range_lock_test_claim(owners, last_grant, offset, len, ticket,
                                                       warp + 1, lane, 32);
        __nanosleep(200);
        __syncwarp();
        bad += range_lock_test_unclaim(owners, offset, len, warp + 1, lane, 32);
        if (__any_sync(RANGE_LOCK_FULL_WARP, bad != 0)) ++failed; else ++passed;
        if (lane == 0) range_lock_release(header, slots, ticket);
    }
    if (lane == 0) {
        atomicAdd(&counts[0], passed);
        atomicAdd(&counts[1], failed);
    }
}

extern "C" __global__ void range_lock_test_try_stress(
    RangeLockHeader* header, RangeSlot* slots, unsigned int* owners,
    unsigned long long* last_grant, unsigned int units, unsigned int iterations,
    unsigned long long seed, unsigned long long* counts) {
    __shared__ unsigned long long ticket, offset, len;
    __shared__ unsigned int granted, iteration_failed;
    unsigned long long rng = (seed ^ (blockIdx.x + 1) * 0x9E3779B97F4A7C15ULL) | 1;
    const unsigned int owner = blockIdx.x + 1;
    unsigned long long passed = 0, failed = 0;
    for (unsigned int i = 0; i < iterations; ++i) {
        if (threadIdx.x == 0) {
            range_lock_test_pick(&rng, units, &offset, &len);
            if (i % 2 == 0) {
                ticket = range_lock_acquire(header, slots, offset, len);
                granted = 1;
            } else {
                granted = range_lock_try_acquire(header, slots, offset, len, &ticket);
            }
            iteration_failed = 0;
        }
        __syncthreads();
        if (granted) {
            unsigned long long bad = range_lock_test_claim(owners, last_grant, offset, len,
                                                           ticket, owner, threadIdx.x,
                                                           blockDim.x);
            __nanosleep(200);
            __syncthreads();
            bad += range_lock_test_unclaim(owners, offset, len, owner, threadIdx.x, blockDim.x);
            if (bad) iteration_failed = 1;
            __syncthreads();
            if (threadIdx.x == 0) {
                range_lock_release(header, slots, ticket);
                if (iteration_failed) ++failed; else ++passed;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&counts[0], passed);
        atomicAdd(&counts[1], failed);
    }
}
