// size_class_pool.cuh: device twin of `common::bitmap::size_class` (GNStor §4.2, GNoR's
// GPU-friendly multi-level memory allocator).
//
// The host builds the pool (`SizeClassPool::new`) and copies its `PoolHeader` and word array into
// GPU memory; device threads then allocate and free with the same lock-free protocol as the host
// (see the Rust module docs): per level a free, a head and a tail bitmap; runs claimed with
// atomicCAS on 64-bit words (ascending words for multi-word runs); splits and merges inside
// windows counted by `transient`; every publication bumps `epoch`. The device never grows the
// pool: `pool_alloc` returns POOL_EXHAUSTED and the host calls `SizeClassPool::grow`.
//
// Self-contained CUDA C++ (no system headers) so that NVRTC compiles it on its own.
#ifndef COMMON_SIZE_CLASS_POOL_CUH
#define COMMON_SIZE_CLASS_POOL_CUH

// Length of PoolHeader's level table (Rust: MAX_LEVELS).
#define POOL_MAX_LEVELS 8
// Bits per bitmap word.
#define POOL_WORD_BITS 64ull
// pool_alloc: no run free (and no unit hidden by a concurrent split or merge); the host grows.
#define POOL_EXHAUSTED 0xFFFFFFFFFFFFFFFFull
// pool_alloc: the length is zero or larger than the maximum capacity.
#define POOL_BAD_LENGTH 0xFFFFFFFFFFFFFFFEull
// pool_alloc: attempts before giving up while others keep publishing or hold windows open.
#define POOL_MAX_ATTEMPTS 256
// Internal: no unit found.
#define POOL_NO_UNIT 0xFFFFFFFFFFFFFFFFull

// Which of a level's three bitmaps (their order in the word array).
#define POOL_BITMAP_FREE 0u
#define POOL_BITMAP_HEAD 1u
#define POOL_BITMAP_TAIL 2u

// pool_free results.
#define POOL_FREE_OK 0
#define POOL_FREE_BAD_LENGTH 1
#define POOL_FREE_MISALIGNED 2
#define POOL_FREE_OUT_OF_RANGE 3
#define POOL_FREE_NOT_ALLOCATED 4

// NVRTC's front end has neither __builtin_offsetof nor <cstddef>'s offsetof; __INTADDR__ is its
// constant-expression equivalent. Other compilers get the builtin.
#ifdef __CUDACC_RTC__
#define POOL_OFFSETOF(type, field) __INTADDR__(&((type*)0)->field)
#else
#define POOL_OFFSETOF(type, field) __builtin_offsetof(type, field)
#endif

// One size level's geometry (Rust: LevelHeader).
struct PoolLevel {
    unsigned long long unit_size;     // unit size in bytes
    unsigned int unit_shift;          // log2(unit_size)
    unsigned int group_shift;         // log2(units of this level per unit of the next; 0 at top)
    unsigned long long word_offset;   // index of this level's free bitmap; head, tail follow it
    unsigned long long bitmap_words;  // words in each of the level's three bitmaps
};
static_assert(sizeof(PoolLevel) == 32, "PoolLevel size");
static_assert(POOL_OFFSETOF(PoolLevel, unit_size) == 0, "PoolLevel.unit_size");
static_assert(POOL_OFFSETOF(PoolLevel, unit_shift) == 8, "PoolLevel.unit_shift");
static_assert(POOL_OFFSETOF(PoolLevel, group_shift) == 12, "PoolLevel.group_shift");
static_assert(POOL_OFFSETOF(PoolLevel, word_offset) == 16, "PoolLevel.word_offset");
static_assert(POOL_OFFSETOF(PoolLevel, bitmap_words) == 24, "PoolLevel.bitmap_words");

// The pool's shared state (Rust: PoolHeader). The counters from `capacity` on are atomics.
struct PoolHeader {
    unsigned long long level_count;    // levels in use
    unsigned long long max_capacity;   // reserved capacity in bytes
    unsigned long long growth_factor;  // host-side growth factor
    unsigned long long capacity;       // active capacity in bytes
    unsigned long long epoch;          // bumped after every publication of free units
    unsigned long long transient;      // open windows hiding units
    unsigned long long growth_events;  // times the host grew the pool
    unsigned long long splits;         // units split into children
    unsigned long long merges;         // groups merged into their parent
    PoolLevel levels[POOL_MAX_LEVELS];
};
static_assert(sizeof(PoolHeader) == 328, "PoolHeader size");
static_assert(POOL_OFFSETOF(PoolHeader, level_count) == 0, "PoolHeader.level_count");
static_assert(POOL_OFFSETOF(PoolHeader, max_capacity) == 8, "PoolHeader.max_capacity");
static_assert(POOL_OFFSETOF(PoolHeader, growth_factor) == 16, "PoolHeader.growth_factor");
static_assert(POOL_OFFSETOF(PoolHeader, capacity) == 24, "PoolHeader.capacity");
static_assert(POOL_OFFSETOF(PoolHeader, epoch) == 32, "PoolHeader.epoch");
static_assert(POOL_OFFSETOF(PoolHeader, transient) == 40, "PoolHeader.transient");
static_assert(POOL_OFFSETOF(PoolHeader, growth_events) == 48, "PoolHeader.growth_events");
static_assert(POOL_OFFSETOF(PoolHeader, splits) == 56, "PoolHeader.splits");
static_assert(POOL_OFFSETOF(PoolHeader, merges) == 64, "PoolHeader.merges");
static_assert(POOL_OFFSETOF(PoolHeader, levels) == 72, "PoolHeader.levels");

// Where a request goes: a run of `units` units of level `level` (Rust: Placement).
struct PoolPlacement {
    unsigned int level;
    unsigned long long units;
    unsigned long long unit_size;
};

__device__ __forceinline__ unsigned long long pool_load(const unsigned long long* address) {
    return *(const volatile unsigned long long*)address;
}

__device__ __forceinline__ unsigned long long* pool_word(const PoolHeader* pool,
                                                         unsigned long long* words,
                                                         unsigned int level, unsigned int bitmap,
                                                         unsigned long long word) {
    const PoolLevel* geometry = &pool->levels[level];
    return words + geometry->word_offset + bitmap * geometry->bitmap_words + word;
}

__device__ __forceinline__ unsigned int pool_top(const PoolHeader* pool) {
    return (unsigned int)pool->level_count - 1;
}

// Mask of units [start, end) within word `word`.
__device__ __forceinline__ unsigned long long pool_segment_mask(unsigned long long start,
                                                                unsigned long long end,
                                                                unsigned long long word) {
    unsigned long long base = word * POOL_WORD_BITS;
    unsigned long long low = (start > base ? start : base) - base;
    unsigned long long high = (end < base + POOL_WORD_BITS ? end : base + POOL_WORD_BITS) - base;
    unsigned long long width = high - low;
    return width == POOL_WORD_BITS ? ~0ull : ((1ull << width) - 1) << low;
}

__device__ __forceinline__ unsigned long long pool_trailing_ones(unsigned long long word) {
    return word == ~0ull ? POOL_WORD_BITS : (unsigned long long)(__ffsll((long long)~word) - 1);
}

__device__ __forceinline__ unsigned long long pool_leading_ones(unsigned long long word) {
    return (unsigned long long)__clzll((long long)~word);
}

// Bits i of `word` such that bits i .. i + run are all set (1 <= run <= 64), by doubling.
__device__ __forceinline__ unsigned long long pool_run_starts(unsigned long long word,
                                                              unsigned long long run) {
    unsigned long long starts = word;
    unsigned long long covered = 1;
    while (covered < run) {
        unsigned long long step = covered < run - covered ? covered : run - covered;
        starts &= starts >> step;
        covered += step;
    }
    return starts;
}

__device__ __forceinline__ void pool_open_window(PoolHeader* pool) {
    atomicAdd(&pool->transient, 1ull);
    __threadfence();
}

__device__ __forceinline__ void pool_close_window(PoolHeader* pool) {
    __threadfence();
    atomicAdd(&pool->transient, ~0ull);  // minus one
}

// Where a request of `len` bytes goes; false for a zero or too large length.
__device__ inline bool pool_placement(const PoolHeader* pool, unsigned long long len,
                                      PoolPlacement* out) {
    if (len == 0 || len > pool->max_capacity) {
        return false;
    }
    unsigned int top = pool_top(pool);
    unsigned int level = 0;
    while (level < top && len > pool->levels[level + 1].unit_size) {
        ++level;
    }
    unsigned long long size = pool->levels[level].unit_size;
    unsigned long long units = (len + size - 1) / size;
    if (level < top && units * size == pool->levels[level + 1].unit_size) {
        // A run as large as one parent: take the parent itself.
        ++level;
        units = 1;
    }
    out->level = level;
    out->units = units;
    out->unit_size = pool->levels[level].unit_size;
    return true;
}

// Active words of a level's bitmaps.
__device__ __forceinline__ unsigned long long pool_active_words(const PoolHeader* pool,
                                                                unsigned int level) {
    unsigned long long units = pool_load(&pool->capacity) >> pool->levels[level].unit_shift;
    return (units + POOL_WORD_BITS - 1) / POOL_WORD_BITS;
}

// Marks units free and bumps the epoch, without merge checks.
__device__ inline void pool_set_free(PoolHeader* pool, unsigned long long* words,
                                     unsigned int level, unsigned long long start,
                                     unsigned long long count) {
    unsigned long long end = start + count;
    if (count == 0) {
        return;
    }
    for (unsigned long long word = start / POOL_WORD_BITS; word <= (end - 1) / POOL_WORD_BITS;
         ++word) {
        atomicOr(pool_word(pool, words, level, POOL_BITMAP_FREE, word),
                 pool_segment_mask(start, end, word));
    }
    __threadfence();
    atomicAdd(&pool->epoch, 1ull);
    __threadfence();
}

__device__ inline bool pool_all_free(const PoolHeader* pool, unsigned long long* words,
                                     unsigned int level, unsigned long long start,
                                     unsigned long long count) {
    unsigned long long end = start + count;
    for (unsigned long long word = start / POOL_WORD_BITS; word <= (end - 1) / POOL_WORD_BITS;
         ++word) {
        unsigned long long mask = pool_segment_mask(start, end, word);
        if ((pool_load(pool_word(pool, words, level, POOL_BITMAP_FREE, word)) & mask) != mask) {
            return false;
        }
    }
    return true;
}

// Whether `unit` is the only set bit of `bitmap` within [start, start + count).
__device__ inline bool pool_only_bit_in_range(const PoolHeader* pool, unsigned long long* words,
                                              unsigned int level, unsigned int bitmap,
                                              unsigned long long start, unsigned long long count,
                                              unsigned long long unit) {
    unsigned long long end = start + count;
    for (unsigned long long word = start / POOL_WORD_BITS; word <= (end - 1) / POOL_WORD_BITS;
         ++word) {
        unsigned long long mask = pool_segment_mask(start, end, word);
        unsigned long long expected =
            unit / POOL_WORD_BITS == word ? 1ull << (unit % POOL_WORD_BITS) : 0ull;
        if ((pool_load(pool_word(pool, words, level, bitmap, word)) & mask) != expected) {
            return false;
        }
    }
    return true;
}

// Clears `mask` in a free-bitmap word if all of it is set; says whether it did.
__device__ __forceinline__ bool pool_clear_if_all_set(unsigned long long* word,
                                                      unsigned long long mask) {
    unsigned long long current = pool_load(word);
    while ((current & mask) == mask) {
        unsigned long long seen = atomicCAS(word, current, current & ~mask);
        if (seen == current) {
            return true;
        }
        current = seen;
    }
    return false;
}

// Claims units [start, start + count) if all are free, word by word in ascending order. On
// failure puts back the units already taken (without merge checks) and returns their count in
// `*put_back`.
__device__ inline bool pool_claim_raw(PoolHeader* pool, unsigned long long* words,
                                      unsigned int level, unsigned long long start,
                                      unsigned long long count, unsigned long long* put_back) {
    unsigned long long end = start + count;
    for (unsigned long long word = start / POOL_WORD_BITS; word <= (end - 1) / POOL_WORD_BITS;
         ++word) {
        if (!pool_clear_if_all_set(pool_word(pool, words, level, POOL_BITMAP_FREE, word),
                                   pool_segment_mask(start, end, word))) {
            unsigned long long base = word * POOL_WORD_BITS;
            unsigned long long taken = (base > start ? base : start) - start;
            if (taken > 0) {
                pool_set_free(pool, words, level, start, taken);
            }
            *put_back = taken;
            return false;
        }
    }
    *put_back = 0;
    return true;
}

// If all children of `group` (a unit of level + 1) are free at `level`, claims them and
// publishes the parent; says whether it did.
__device__ inline bool pool_merge_group(PoolHeader* pool, unsigned long long* words,
                                        unsigned int level, unsigned long long group) {
    unsigned int group_shift = pool->levels[level].group_shift;
    unsigned long long first = group << group_shift;
    unsigned long long children = 1ull << group_shift;
    while (pool_all_free(pool, words, level, first, children)) {
        pool_open_window(pool);
        unsigned long long put_back;
        bool merged = pool_claim_raw(pool, words, level, first, children, &put_back);
        if (merged) {
            atomicAdd(&pool->merges, 1ull);
            pool_set_free(pool, words, level + 1, group, 1);
        }
        pool_close_window(pool);
        if (merged) {
            return true;
        }
        // An allocation took a child meanwhile and may put it back: look again.
    }
    return false;
}

// Merges `group` at `level`, then the group its parent belongs to, and so on upwards.
__device__ inline void pool_merge_upwards(PoolHeader* pool, unsigned long long* words,
                                          unsigned int level, unsigned long long group) {
    while (level < pool_top(pool) && pool_merge_group(pool, words, level, group)) {
        ++level;
        group >>= pool->levels[level].group_shift;
    }
}

// Merges every complete group of children among units [start, start + count), cascading.
__device__ inline void pool_merge_groups(PoolHeader* pool, unsigned long long* words,
                                         unsigned int level, unsigned long long start,
                                         unsigned long long count) {
    if (level == pool_top(pool) || count == 0) {
        return;
    }
    unsigned int group_shift = pool->levels[level].group_shift;
    unsigned long long last = (start + count - 1) >> group_shift;
    for (unsigned long long group = start >> group_shift; group <= last; ++group) {
        pool_merge_upwards(pool, words, level, group);
    }
}

// Merges every complete group in the active range, lowest level first.
__device__ inline void pool_coalesce(PoolHeader* pool, unsigned long long* words) {
    unsigned long long capacity = pool_load(&pool->capacity);
    for (unsigned int level = 0; level < pool_top(pool); ++level) {
        unsigned long long groups = capacity >> pool->levels[level + 1].unit_shift;
        for (unsigned long long group = 0; group < groups; ++group) {
            pool_merge_group(pool, words, level, group);
        }
    }
}

// Claims a run for an allocation; multi-word claims run in a window. With `hidden` the window
// stays open on success: the caller (a split) republishes part of the run and closes it.
__device__ inline bool pool_claim(PoolHeader* pool, unsigned long long* words, unsigned int level,
                                  unsigned long long start, unsigned long long count, bool hidden) {
    bool multi_word = start / POOL_WORD_BITS != (start + count - 1) / POOL_WORD_BITS;
    bool window = hidden || multi_word;
    if (window) {
        pool_open_window(pool);
    }
    unsigned long long put_back;
    bool claimed = pool_claim_raw(pool, words, level, start, count, &put_back);
    if (!claimed) {
        pool_merge_groups(pool, words, level, start, put_back);
    }
    if (window && !(claimed && hidden)) {
        pool_close_window(pool);
    }
    return claimed;
}

// First unit of the first run of `count` free units at `level`, scanning from `first_word`.
__device__ inline unsigned long long pool_find_run(const PoolHeader* pool,
                                                   unsigned long long* words, unsigned int level,
                                                   unsigned long long count,
                                                   unsigned long long first_word) {
    // The run of set bits that ends at the top of the previous word.
    unsigned long long carry_start = 0;
    unsigned long long carry_len = 0;
    unsigned long long active = pool_active_words(pool, level);
    for (unsigned long long index = first_word; index < active; ++index) {
        unsigned long long word = pool_load(pool_word(pool, words, level, POOL_BITMAP_FREE, index));
        unsigned long long base = index * POOL_WORD_BITS;
        if (carry_len > 0 && carry_len + pool_trailing_ones(word) >= count) {
            return carry_start;
        }
        if (count <= POOL_WORD_BITS) {
            unsigned long long starts = pool_run_starts(word, count);
            if (starts != 0) {
                return base + (unsigned long long)(__ffsll((long long)starts) - 1);
            }
        }
        if (word == ~0ull) {
            if (carry_len == 0) {
                carry_start = base;
            }
            carry_len += POOL_WORD_BITS;
        } else {
            carry_len = pool_leading_ones(word);
            carry_start = base + POOL_WORD_BITS - carry_len;
        }
    }
    return POOL_NO_UNIT;
}

// Claims the first free run of `count` units at `level`: first from the word `hint` picks (to
// spread threads over the bitmap), then from the start (first fit, and runs across the hint).
__device__ inline unsigned long long pool_take_free(PoolHeader* pool, unsigned long long* words,
                                                    unsigned int level, unsigned long long count,
                                                    bool hidden, unsigned int hint) {
    unsigned long long active = pool_active_words(pool, level);
    unsigned long long first_word = active == 0 ? 0 : hint % active;
    for (;;) {
        unsigned long long start = pool_find_run(pool, words, level, count, first_word);
        if (start == POOL_NO_UNIT && first_word != 0) {
            first_word = 0;
            continue;
        }
        if (start == POOL_NO_UNIT) {
            return POOL_NO_UNIT;
        }
        if (pool_claim(pool, words, level, start, count, hidden)) {
            return start;
        }
    }
}

// Claims `count` contiguous units at `level`; with no run free, splits a unit of the lowest
// larger level that has one, down to `level`, keeping the first child each time.
__device__ inline unsigned long long pool_take(PoolHeader* pool, unsigned long long* words,
                                               unsigned int level, unsigned long long count,
                                               unsigned int hint) {
    unsigned long long start = pool_take_free(pool, words, level, count, false, hint);
    if (start != POOL_NO_UNIT) {
        return start;
    }
    // The window opened for the split unit stays open until its last children are public.
    unsigned int parent_level = level + 1;
    unsigned long long parent = POOL_NO_UNIT;
    for (; parent_level <= pool_top(pool); ++parent_level) {
        parent = pool_take_free(pool, words, parent_level, 1, true, hint);
        if (parent != POOL_NO_UNIT) {
            break;
        }
    }
    if (parent == POOL_NO_UNIT) {
        return POOL_NO_UNIT;
    }
    while (parent_level > level) {
        --parent_level;
        unsigned int group_shift = pool->levels[parent_level].group_shift;
        unsigned long long first = parent << group_shift;
        unsigned long long kept = parent_level == level ? count : 1;
        atomicAdd(&pool->splits, 1ull);
        pool_set_free(pool, words, parent_level, first + kept, (1ull << group_shift) - kept);
        parent = first;
    }
    pool_close_window(pool);
    return parent;
}

// Allocates `len` bytes (rounded up to its level); returns the byte offset, POOL_EXHAUSTED or
// POOL_BAD_LENGTH. `hint` (e.g. the global thread index) picks where the scan starts.
__device__ inline unsigned long long pool_alloc(PoolHeader* pool, unsigned long long* words,
                                                unsigned long long len, unsigned int hint) {
    PoolPlacement placement;
    if (!pool_placement(pool, len, &placement)) {
        return POOL_BAD_LENGTH;
    }
    unsigned int level = placement.level;
    for (int attempt = 0; attempt < POOL_MAX_ATTEMPTS; ++attempt) {
        __threadfence();
        unsigned long long epoch = pool_load(&pool->epoch);
        unsigned long long start = pool_take(pool, words, level, placement.units, hint);
        if (start != POOL_NO_UNIT) {
            unsigned long long last = start + placement.units - 1;
            atomicOr(pool_word(pool, words, level, POOL_BITMAP_TAIL, last / POOL_WORD_BITS),
                     1ull << (last % POOL_WORD_BITS));
            atomicOr(pool_word(pool, words, level, POOL_BITMAP_HEAD, start / POOL_WORD_BITS),
                     1ull << (start % POOL_WORD_BITS));
            __threadfence();
            return start << pool->levels[level].unit_shift;
        }
        pool_coalesce(pool, words);
        __threadfence();
        if (pool_load(&pool->transient) == 0 && pool_load(&pool->epoch) == epoch) {
            return POOL_EXHAUSTED;
        }
        // Units are hidden in an open window or came free meanwhile: look again.
        __nanosleep(32);
    }
    return POOL_EXHAUSTED;
}

// Frees an allocation of `len` bytes at `offset` and merges what it completes; returns
// POOL_FREE_OK or the reason it was rejected (double free, bad offset or length).
__device__ inline int pool_free(PoolHeader* pool, unsigned long long* words,
                                unsigned long long offset, unsigned long long len) {
    PoolPlacement placement;
    if (!pool_placement(pool, len, &placement)) {
        return POOL_FREE_BAD_LENGTH;
    }
    unsigned int level = placement.level;
    unsigned long long units = placement.units;
    if (offset % placement.unit_size != 0) {
        return POOL_FREE_MISALIGNED;
    }
    unsigned long long rounded = units * placement.unit_size;
    unsigned long long capacity = pool_load(&pool->capacity);
    if (offset > capacity || rounded > capacity - offset) {
        return POOL_FREE_OUT_OF_RANGE;
    }
    unsigned long long start = offset >> pool->levels[level].unit_shift;
    unsigned long long last = start + units - 1;
    if (!pool_only_bit_in_range(pool, words, level, POOL_BITMAP_HEAD, start, units, start) ||
        !pool_only_bit_in_range(pool, words, level, POOL_BITMAP_TAIL, start, units, last)) {
        return POOL_FREE_NOT_ALLOCATED;
    }
    // The commit point: of two concurrent frees of one allocation, one clears the head.
    unsigned long long head = 1ull << (start % POOL_WORD_BITS);
    unsigned long long before = atomicAnd(
        pool_word(pool, words, level, POOL_BITMAP_HEAD, start / POOL_WORD_BITS), ~head);
    if ((before & head) == 0) {
        return POOL_FREE_NOT_ALLOCATED;
    }
    atomicAnd(pool_word(pool, words, level, POOL_BITMAP_TAIL, last / POOL_WORD_BITS),
              ~(1ull << (last % POOL_WORD_BITS)));
    __threadfence();
    pool_set_free(pool, words, level, start, units);
    pool_merge_groups(pool, words, level, start, units);
    return POOL_FREE_OK;
}

// Bytes free over all levels (a snapshot).
__device__ inline unsigned long long pool_free_bytes(const PoolHeader* pool,
                                                     unsigned long long* words) {
    unsigned long long bytes = 0;
    for (unsigned int level = 0; level < pool->level_count; ++level) {
        unsigned long long active = pool_active_words(pool, level);
        for (unsigned long long word = 0; word < active; ++word) {
            bytes += (unsigned long long)__popcll(
                         pool_load(pool_word(pool, words, level, POOL_BITMAP_FREE, word))) *
                     pool->levels[level].unit_size;
        }
    }
    return bytes;
}

#endif  // COMMON_SIZE_CLASS_POOL_CUH
