// size_class_pool_test.cu: device checks of size_class_pool.cuh (GNStor §4.2 allocator).
//
// Launch contract (one stream, in this order; every pointer is device memory):
//   1. size_class_pool_test_init<<<1, 1>>>(pool, words, word_count, owners, counters)
//        pool:     PoolHeader (328 bytes)
//        words:    SIZE_CLASS_TEST_WORDS (207) unsigned long long
//        word_count: 207 (checked against the geometry the kernel computes)
//        owners:   SIZE_CLASS_TEST_UNITS (4096) unsigned int, one per 4 KiB of the 16 MiB range
//        counters: SIZE_CLASS_TEST_COUNTERS (8) unsigned long long
//      Builds the pool SizeClassPool::new makes for levels 4 KiB / 64 KiB / 1 MiB, 8 MiB active,
//      16 MiB reserved, factor 2 (the Rust test shared_layout_matches_the_device_test_fixture
//      pins the same geometry: word offsets 0, 192, 204; 64, 4, 1 words per bitmap), and zeroes
//      owners and counters.
//   2. size_class_pool_test_sequential<<<1, 1>>>(pool, words, counters)
//      Single-thread split / run / merge / bad-free sequence with exact expected offsets (the
//      same as the Rust tests small_allocation_splits_down_and_free_merges_back and
//      runs_are_contiguous_and_reuse_split_remainders); leaves the pool whole.
//   3. size_class_pool_test_stress<<<8, 128>>>(pool, words, owners, counters, rounds = 64)
//      (any grid and block size works) Every thread allocates and frees random sizes
//      concurrently, marking each 4 KiB unit it owns with atomicAdd; a unit owned twice counts
//      as an overlap. Threads free everything they hold before exiting.
//   4. size_class_pool_test_verify<<<1, 1>>>(pool, words, counters)
//      Checks that the pool is whole again: every active 1 MiB unit free at the top level,
//      nothing free below it, no head or tail bit left, no window open.
//
// Result: counters[0 .. SIZE_CLASS_TEST_MUST_BE_ZERO] must all be 0 and
// counters[SIZE_CLASS_TEST_ALLOCATED] must be > 0; counters[SIZE_CLASS_TEST_EXHAUSTED] is
// informational (the stress test over-subscribes the 8 MiB pool on purpose).
#include "size_class_pool.cuh"

#define SIZE_CLASS_TEST_WORDS 207ull
#define SIZE_CLASS_TEST_UNITS 4096ull
#define SIZE_CLASS_TEST_COUNTERS 8

// Counter indices.
#define SIZE_CLASS_TEST_OVERLAPS 0      // 4 KiB units owned by two allocations at once
#define SIZE_CLASS_TEST_MISALIGNED 1    // offsets not aligned to their level's unit
#define SIZE_CLASS_TEST_FREE_ERRORS 2   // pool_free of a live allocation rejected
#define SIZE_CLASS_TEST_SEQUENTIAL 3    // failed checks of the sequential kernel
#define SIZE_CLASS_TEST_NOT_WHOLE 4     // failed checks of the verify kernel
#define SIZE_CLASS_TEST_LAYOUT 5        // geometry mismatch found by the init kernel
#define SIZE_CLASS_TEST_MUST_BE_ZERO 6  // counters below this index must be 0
#define SIZE_CLASS_TEST_EXHAUSTED 6     // allocations that found the pool exhausted
#define SIZE_CLASS_TEST_ALLOCATED 7     // successful allocations in the stress kernel

#define SIZE_CLASS_TEST_KIB 1024ull
#define SIZE_CLASS_TEST_MIB (1024ull * 1024ull)
#define SIZE_CLASS_TEST_HELD 2

extern "C" __global__ void size_class_pool_test_init(PoolHeader* pool, unsigned long long* words,
                                                     unsigned long long word_count,
                                                     unsigned int* owners,
                                                     unsigned long long* counters) {
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    for (int index = 0; index < SIZE_CLASS_TEST_COUNTERS; ++index) {
        counters[index] = 0;
    }
    for (unsigned long long unit = 0; unit < SIZE_CLASS_TEST_UNITS; ++unit) {
        owners[unit] = 0;
    }
    const unsigned long long sizes[3] = {4 * SIZE_CLASS_TEST_KIB, 64 * SIZE_CLASS_TEST_KIB,
                                         SIZE_CLASS_TEST_MIB};
    const unsigned long long max_capacity = 16 * SIZE_CLASS_TEST_MIB;
    pool->level_count = 3;
    pool->max_capacity = max_capacity;
    pool->growth_factor = 2;
    pool->capacity = 8 * SIZE_CLASS_TEST_MIB;
    pool->epoch = 0;
    pool->transient = 0;
    pool->growth_events = 0;
    pool->splits = 0;
    pool->merges = 0;
    unsigned long long total = 0;
    for (unsigned int level = 0; level < POOL_MAX_LEVELS; ++level) {
        PoolLevel* geometry = &pool->levels[level];
        if (level >= 3) {
            geometry->unit_size = 0;
            geometry->unit_shift = 0;
            geometry->group_shift = 0;
            geometry->word_offset = 0;
            geometry->bitmap_words = 0;
            continue;
        }
        unsigned long long size = sizes[level];
        unsigned long long next = level + 1 < 3 ? sizes[level + 1] : size;
        geometry->unit_size = size;
        geometry->unit_shift = (unsigned int)(__ffsll((long long)size) - 1);
        geometry->group_shift = (unsigned int)(__ffsll((long long)(next / size)) - 1);
        geometry->word_offset = total;
        geometry->bitmap_words = (max_capacity / size + POOL_WORD_BITS - 1) / POOL_WORD_BITS;
        total += 3 * geometry->bitmap_words;
    }
    if (total != word_count || total != SIZE_CLASS_TEST_WORDS ||
        pool->levels[1].word_offset != 192 || pool->levels[2].word_offset != 204) {
        counters[SIZE_CLASS_TEST_LAYOUT] += 1;
        return;
    }
    for (unsigned long long word = 0; word < word_count; ++word) {
        words[word] = 0;
    }
    pool_set_free(pool, words, 2, 0, pool->capacity >> 20);
}

// Counts a failed check of the sequential kernel.
__device__ void size_class_test_expect(bool ok, unsigned long long* counters) {
    if (!ok) {
        counters[SIZE_CLASS_TEST_SEQUENTIAL] += 1;
    }
}

// Free units at `level` (a snapshot).
__device__ unsigned long long size_class_test_free_units(const PoolHeader* pool,
                                                         unsigned long long* words,
                                                         unsigned int level) {
    unsigned long long units = 0;
    unsigned long long active = pool_active_words(pool, level);
    for (unsigned long long word = 0; word < active; ++word) {
        units += (unsigned long long)__popcll(
            pool_load(pool_word(pool, words, level, POOL_BITMAP_FREE, word)));
    }
    return units;
}

extern "C" __global__ void size_class_pool_test_sequential(PoolHeader* pool,
                                                           unsigned long long* words,
                                                           unsigned long long* counters) {
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    const unsigned long long kib = SIZE_CLASS_TEST_KIB;
    const unsigned long long capacity = pool->capacity;

    PoolPlacement placement;
    size_class_test_expect(pool_placement(pool, 60 * kib, &placement) && placement.level == 0 &&
                               placement.units == 15,
                           counters);
    size_class_test_expect(pool_placement(pool, 64 * kib, &placement) && placement.level == 1 &&
                               placement.units == 1,
                           counters);
    size_class_test_expect(pool_placement(pool, 3 * SIZE_CLASS_TEST_MIB + 1, &placement) &&
                               placement.level == 2 && placement.units == 4,
                           counters);
    size_class_test_expect(!pool_placement(pool, 0, &placement), counters);
    size_class_test_expect(pool_alloc(pool, words, 0, 0) == POOL_BAD_LENGTH, counters);

    // One 4 KiB allocation splits a 1 MiB and a 64 KiB unit; its free merges both back.
    unsigned long long small = pool_alloc(pool, words, 4 * kib, 0);
    size_class_test_expect(small == 0, counters);
    size_class_test_expect(pool->splits == 2, counters);
    size_class_test_expect(size_class_test_free_units(pool, words, 0) == 15 &&
                               size_class_test_free_units(pool, words, 1) == 15 &&
                               size_class_test_free_units(pool, words, 2) == 7,
                           counters);
    size_class_test_expect(pool_free_bytes(pool, words) == capacity - 4 * kib, counters);
    size_class_test_expect(pool_free(pool, words, small, 4 * kib) == POOL_FREE_OK, counters);
    size_class_test_expect(pool->merges == 2, counters);
    size_class_test_expect(pool_free(pool, words, small, 4 * kib) == POOL_FREE_NOT_ALLOCATED,
                           counters);

    // A 60 KiB run takes 15 contiguous 4 KiB units; the 16th serves the next 4 KiB request.
    unsigned long long run = pool_alloc(pool, words, 60 * kib, 0);
    unsigned long long next = pool_alloc(pool, words, 4 * kib, 0);
    unsigned long long mid = pool_alloc(pool, words, 128 * kib, 0);
    size_class_test_expect(run == 0 && next == 60 * kib && mid == 64 * kib, counters);

    // Bad frees are rejected and change nothing.
    unsigned long long free_before = pool_free_bytes(pool, words);
    size_class_test_expect(pool_free(pool, words, run + 4 * kib, 56 * kib) ==
                               POOL_FREE_NOT_ALLOCATED,
                           counters);
    size_class_test_expect(pool_free(pool, words, run, 8 * kib) == POOL_FREE_NOT_ALLOCATED,
                           counters);
    size_class_test_expect(pool_free(pool, words, mid, 64 * kib) == POOL_FREE_NOT_ALLOCATED,
                           counters);
    size_class_test_expect(pool_free(pool, words, 2 * kib, 4 * kib) == POOL_FREE_MISALIGNED,
                           counters);
    size_class_test_expect(pool_free(pool, words, capacity, 4 * kib) == POOL_FREE_OUT_OF_RANGE,
                           counters);
    size_class_test_expect(pool_free(pool, words, 0, 0) == POOL_FREE_BAD_LENGTH, counters);
    size_class_test_expect(pool_free_bytes(pool, words) == free_before, counters);

    size_class_test_expect(pool_free(pool, words, next, 4 * kib) == POOL_FREE_OK, counters);
    size_class_test_expect(pool_free(pool, words, run, 60 * kib) == POOL_FREE_OK, counters);
    size_class_test_expect(pool_free(pool, words, mid, 128 * kib) == POOL_FREE_OK, counters);

    // Exhaustion: the device never grows, it reports POOL_EXHAUSTED for the host to grow.
    size_class_test_expect(pool_alloc(pool, words, 9 * SIZE_CLASS_TEST_MIB, 0) == POOL_EXHAUSTED,
                           counters);
    size_class_test_expect(size_class_test_free_units(pool, words, 2) == capacity >> 20 &&
                               pool_free_bytes(pool, words) == capacity,
                           counters);
}

// A small deterministic generator per thread (xorshift64*).
__device__ unsigned long long size_class_test_next(unsigned long long* state) {
    unsigned long long x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

// Marks (owned) or unmarks the 4 KiB units of an allocation, counting overlaps.
__device__ void size_class_test_mark(unsigned int* owners, unsigned long long offset,
                                     unsigned long long len, bool owned,
                                     unsigned long long* counters) {
    unsigned long long first = offset / (4 * SIZE_CLASS_TEST_KIB);
    unsigned long long end = (offset + len) / (4 * SIZE_CLASS_TEST_KIB);
    for (unsigned long long unit = first; unit < end; ++unit) {
        unsigned int before = atomicAdd(&owners[unit], owned ? 1u : 0xFFFFFFFFu);
        if (before != (owned ? 0u : 1u)) {
            atomicAdd(&counters[SIZE_CLASS_TEST_OVERLAPS], 1ull);
        }
    }
}

extern "C" __global__ void size_class_pool_test_stress(PoolHeader* pool, unsigned long long* words,
                                                       unsigned int* owners,
                                                       unsigned long long* counters,
                                                       unsigned int rounds) {
    const unsigned long long kib = SIZE_CLASS_TEST_KIB;
    const unsigned long long sizes[8] = {4 * kib,   4 * kib,   8 * kib,   16 * kib,
                                         60 * kib,  64 * kib,  200 * kib, SIZE_CLASS_TEST_MIB};
    unsigned int thread = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long state = 0x9E3779B97F4A7C15ull * (thread + 1);
    unsigned long long held_offset[SIZE_CLASS_TEST_HELD];
    unsigned long long held_len[SIZE_CLASS_TEST_HELD];
    int held = 0;
    for (unsigned int round = 0; round < rounds; ++round) {
        unsigned long long random = size_class_test_next(&state);
        if (held < SIZE_CLASS_TEST_HELD && (random & 3) != 0) {
            unsigned long long len = sizes[(random >> 8) & 7];
            unsigned long long offset = pool_alloc(pool, words, len, thread);
            if (offset == POOL_EXHAUSTED) {
                atomicAdd(&counters[SIZE_CLASS_TEST_EXHAUSTED], 1ull);
                continue;
            }
            PoolPlacement placement;
            pool_placement(pool, len, &placement);
            unsigned long long rounded = placement.units * placement.unit_size;
            if (offset == POOL_BAD_LENGTH || offset % placement.unit_size != 0) {
                atomicAdd(&counters[SIZE_CLASS_TEST_MISALIGNED], 1ull);
                continue;
            }
            atomicAdd(&counters[SIZE_CLASS_TEST_ALLOCATED], 1ull);
            size_class_test_mark(owners, offset, rounded, true, counters);
            held_offset[held] = offset;
            held_len[held] = rounded;
            ++held;
        } else if (held > 0) {
            --held;
            size_class_test_mark(owners, held_offset[held], held_len[held], false, counters);
            if (pool_free(pool, words, held_offset[held], held_len[held]) != POOL_FREE_OK) {
                atomicAdd(&counters[SIZE_CLASS_TEST_FREE_ERRORS], 1ull);
            }
        }
    }
    while (held > 0) {
        --held;
        size_class_test_mark(owners, held_offset[held], held_len[held], false, counters);
        if (pool_free(pool, words, held_offset[held], held_len[held]) != POOL_FREE_OK) {
            atomicAdd(&counters[SIZE_CLASS_TEST_FREE_ERRORS], 1ull);
        }
    }
}

extern "C" __global__ void size_class_pool_test_verify(PoolHeader* pool, unsigned long long* words,
                                                       unsigned long long* counters) {
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    unsigned long long capacity = pool_load(&pool->capacity);
    unsigned int top = pool_top(pool);
    bool whole = pool_load(&pool->transient) == 0 && pool_free_bytes(pool, words) == capacity &&
                 size_class_test_free_units(pool, words, top) ==
                     capacity >> pool->levels[top].unit_shift;
    for (unsigned int level = 0; level <= top; ++level) {
        if (level < top && size_class_test_free_units(pool, words, level) != 0) {
            whole = false;
        }
        for (unsigned long long word = 0; word < pool->levels[level].bitmap_words; ++word) {
            if (pool_load(pool_word(pool, words, level, POOL_BITMAP_HEAD, word)) != 0 ||
                pool_load(pool_word(pool, words, level, POOL_BITMAP_TAIL, word)) != 0) {
                whole = false;
            }
        }
    }
    if (!whole) {
        counters[SIZE_CLASS_TEST_NOT_WHOLE] += 1;
    }
}
