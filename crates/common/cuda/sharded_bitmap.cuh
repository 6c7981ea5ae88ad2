// GoFS's sharded block allocator on the device (GoFS paper §3.3, "Scalable block allocation with
// per-SM bitmaps"). Twin of crates/common/src/bitmap/sharded.rs: the same layout and protocol,
// so the host builds the allocator, copies its parts to the device, and kernels allocate and free.
//
// Blocks are grouped in segments with a validity bitmap (bit set = block in use); segments are
// owned by shards, one per SM. sharded_alloc reserves n blocks from one shard with a single
// compare-and-swap on the shard's free count, then claims that many free bits with atomicOr, a
// whole word at a time where it is empty. sharded_alloc_coalesced lets a thread block allocate
// once: a __syncthreads prefix sum adds up the threads' needs, thread 0 allocates from the shard
// of its SM (%smid modulo the shard count), and every thread takes its slice.
//
// The device never redistributes segments. When a reservation takes a shard below its low
// watermark, or the SM's shard cannot serve a request and another shard does, the shard's low
// flag is raised and the call reports SHARDED_OK_SHARD_LOW; the host (the GoFS daemon) answers by
// calling ShardedAllocator::rebalance between kernel launches, or while allocating kernels are
// paused, and copying the parts back. Operations count themselves in their shard's `active` word
// and wait while `ShardedControl::rebalancing` is set, the host's exclusion protocol.
#ifndef GPU_STORAGE_SHARDED_BITMAP_CUH
#define GPU_STORAGE_SHARDED_BITMAP_CUH

// NVRTC's front end has neither __builtin_offsetof nor <cstddef>'s offsetof; __INTADDR__ is its
// constant-expression equivalent. Other compilers get the builtin.
#ifdef __CUDACC_RTC__
#define SHARDED_OFFSETOF(type, field) __INTADDR__(&((type*)0)->field)
#else
#define SHARDED_OFFSETOF(type, field) __builtin_offsetof(type, field)
#endif

// Geometry and global flags (Rust: ControlBlock).
struct alignas(64) ShardedControl {
  unsigned long long total_blocks;
  unsigned int segment_count;
  unsigned int blocks_per_segment;  // a power of two
  unsigned int words_per_segment;   // bitmap words per segment; bits past a short segment are set
  unsigned int shard_count;
  unsigned int rebalancing;         // non-zero while the host redistributes
  unsigned int rebalance_count;
  unsigned int reserved[8];
};
static_assert(sizeof(ShardedControl) == 64, "differs from Rust");
static_assert(alignof(ShardedControl) == 64, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedControl, segment_count) == 8, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedControl, blocks_per_segment) == 12, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedControl, words_per_segment) == 16, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedControl, shard_count) == 20, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedControl, rebalancing) == 24, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedControl, rebalance_count) == 28, "differs from Rust");

// One shard on its own cache line (Rust: ShardHeader). The shard owns the segments
// shard_segments[list_begin .. list_begin + list_len]; free_blocks counts their free blocks not
// reserved by an allocation in flight.
struct alignas(64) ShardedShardHeader {
  unsigned long long free_blocks;
  unsigned long long low_watermark;
  unsigned long long scan_hint;  // list position << 32 | word of that segment
  unsigned int list_begin;
  unsigned int list_len;
  unsigned int active;  // operations inside the shard
  unsigned int low;     // raised when a reservation crossed low_watermark
  unsigned int reserved[6];
};
static_assert(sizeof(ShardedShardHeader) == 64, "differs from Rust");
static_assert(alignof(ShardedShardHeader) == 64, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedShardHeader, low_watermark) == 8, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedShardHeader, scan_hint) == 16, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedShardHeader, list_begin) == 24, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedShardHeader, list_len) == 28, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedShardHeader, active) == 32, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedShardHeader, low) == 36, "differs from Rust");

// A run of consecutive blocks (Rust: Extent).
struct ShardedExtent {
  unsigned long long start;
  unsigned long long count;
};
static_assert(sizeof(ShardedExtent) == 16, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedExtent, count) == 8, "differs from Rust");

// Device addresses of the parts, passed to kernels by value (Rust: ShardedDeviceView).
struct ShardedBitmap {
  ShardedControl* control;
  ShardedShardHeader* shards;
  unsigned long long* bitmap;   // words_per_segment words per segment
  unsigned int* segment_used;   // blocks in use per segment
  unsigned int* segment_owner;  // owning shard per segment
  unsigned int* shard_segments; // every shard's segments, ascending, shard after shard
};
static_assert(sizeof(ShardedBitmap) == 48, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedBitmap, shards) == 8, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedBitmap, bitmap) == 16, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedBitmap, segment_used) == 24, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedBitmap, segment_owner) == 32, "differs from Rust");
static_assert(SHARDED_OFFSETOF(ShardedBitmap, shard_segments) == 40, "differs from Rust");

enum ShardedStatus : unsigned int {
  SHARDED_OK = 0,
  // Granted, but a shard is low: the host should rebalance.
  SHARDED_OK_SHARD_LOW = 1,
  // No single shard holds the request: the host must rebalance, or the device is full.
  SHARDED_NO_SPACE = 2,
  // The grant needs more extents than the caller's array holds; nothing was allocated.
  SHARDED_TOO_FRAGMENTED = 3,
  // A request for zero blocks, or an empty extent array.
  SHARDED_INVALID = 4,
  // A free range that leaves the device.
  SHARDED_OUT_OF_RANGE = 5,
  // A free range holding a free block; nothing was freed unless a racing free of the same
  // blocks got there first.
  SHARDED_DOUBLE_FREE = 6,
};

// Most threads sharded_alloc_coalesced serves per block, and most extents per block grant.
constexpr unsigned int SHARDED_MAX_BLOCK_THREADS = 1024;
constexpr unsigned int SHARDED_MAX_EXTENTS = 64;

namespace sharded_detail {

__device__ __forceinline__ unsigned long long low_mask(unsigned long long count) {
  return count >= 64 ? ~0ull : (1ull << count) - 1;
}

__device__ __forceinline__ unsigned int trailing_zeros(unsigned long long bits) {
  return bits == 0 ? 64u : (unsigned int)(__ffsll((long long)bits) - 1);
}

__device__ __forceinline__ unsigned long long load(const unsigned long long* word) {
  return *(const volatile unsigned long long*)word;
}

__device__ __forceinline__ unsigned int load(const unsigned int* word) {
  return *(const volatile unsigned int*)word;
}

// Joins a shard, waiting while the host redistributes.
__device__ __forceinline__ void enter(const ShardedBitmap& bm, unsigned int shard) {
  unsigned int* active = &bm.shards[shard].active;
  for (;;) {
    atomicAdd(active, 1u);
    // The count must be visible before the flag is read (the host does the converse).
    __threadfence_system();
    if (load(&bm.control->rebalancing) == 0) return;
    atomicSub(active, 1u);
    while (load(&bm.control->rebalancing) != 0) __nanosleep(256);
  }
}

__device__ __forceinline__ void leave(const ShardedBitmap& bm, unsigned int shard) {
  __threadfence_system();  // publish this operation's writes before the host may take over
  atomicSub(&bm.shards[shard].active, 1u);
}

// Joins the shard owning `segment`; the owner cannot change until leave.
__device__ __forceinline__ unsigned int enter_owner(const ShardedBitmap& bm, unsigned int segment) {
  for (;;) {
    unsigned int shard = load(&bm.segment_owner[segment]);
    enter(bm, shard);
    if (load(&bm.segment_owner[segment]) == shard) return shard;
    leave(bm, shard);
  }
}

// Bitmap word of `block` and its bit.
__device__ __forceinline__ unsigned long long locate(const ShardedBitmap& bm,
                                                     unsigned long long block, unsigned int* bit) {
  const unsigned long long bps = bm.control->blocks_per_segment;
  const unsigned long long segment = block / bps, offset = block % bps;
  *bit = (unsigned int)(offset % 64);
  return segment * bm.control->words_per_segment + offset / 64;
}

// End of the bitmap word holding `block` (bit `bit`), cut to `end`.
__device__ __forceinline__ unsigned long long word_end(const ShardedBitmap& bm,
                                                       unsigned long long block, unsigned int bit,
                                                       unsigned long long end) {
  const unsigned long long bps = bm.control->blocks_per_segment;
  const unsigned long long limit = block - bit + (bps < 64 ? bps : 64);
  return limit < end ? limit : end;
}

// Takes n from the shard's free count in one step; *crossed_low tells whether this took it
// below the low watermark (its flag is then raised).
__device__ __forceinline__ bool reserve(const ShardedBitmap& bm, unsigned int shard,
                                        unsigned long long n, bool* crossed_low) {
  ShardedShardHeader* header = &bm.shards[shard];
  unsigned long long free = load(&header->free_blocks);
  for (;;) {
    if (free < n) return false;
    const unsigned long long seen = atomicCAS(&header->free_blocks, free, free - n);
    if (seen == free) break;
    free = seen;
  }
  const unsigned long long watermark = load(&header->low_watermark);
  *crossed_low = free >= watermark && free - n < watermark;
  if (*crossed_low) atomicExch(&header->low, 1u);
  return true;
}

// Bits to try in `current` (not full): the whole word when empty and `wanted` fills it, else the
// lowest free run cut to `wanted`.
__device__ __forceinline__ unsigned long long claim_mask(unsigned long long current,
                                                         unsigned long long wanted) {
  if (current == 0 && wanted >= 64) return ~0ull;
  const unsigned int first_free = trailing_zeros(~current);
  unsigned long long run = trailing_zeros(current >> first_free);
  if (run > 64 - first_free) run = 64 - first_free;
  return low_mask(run < wanted ? run : wanted) << first_free;
}

// Appends the runs of `bits` (bit 0 = block `base`), merging with the last extent; returns the
// bits that found no room.
__device__ __forceinline__ unsigned long long push_runs(ShardedExtent* extents,
                                                        unsigned int max_extents,
                                                        unsigned int* extent_count,
                                                        unsigned long long base,
                                                        unsigned long long bits) {
  while (bits != 0) {
    const unsigned int start = trailing_zeros(bits);
    const unsigned long long len = trailing_zeros(~(bits >> start));
    const unsigned long long block = base + start;
    ShardedExtent* last = *extent_count > 0 ? &extents[*extent_count - 1] : nullptr;
    if (last != nullptr && last->start + last->count == block) {
      last->count += len;
    } else if (*extent_count < max_extents) {
      extents[*extent_count].start = block;
      extents[*extent_count].count = len;
      ++*extent_count;
    } else {
      return bits;
    }
    bits &= ~(low_mask(len) << start);
  }
  return 0;
}

// Clears the bits of blocks [start, end) of one segment, which this caller holds.
__device__ __forceinline__ void release_in_segment(const ShardedBitmap& bm,
                                                   unsigned long long start,
                                                   unsigned long long end) {
  const unsigned long long segment = start / bm.control->blocks_per_segment;
  for (unsigned long long block = start; block < end;) {
    unsigned int bit;
    const unsigned long long word = locate(bm, block, &bit);
    const unsigned long long next = word_end(bm, block, bit, end);
    atomicAnd(&bm.bitmap[word], ~(low_mask(next - block) << bit));
    block = next;
  }
  atomicSub(&bm.segment_used[segment], (unsigned int)(end - start));
}

// Gives back an extent this caller holds (it may span segments of the same shard).
__device__ __forceinline__ void release(const ShardedBitmap& bm, const ShardedExtent& extent) {
  const unsigned long long bps = bm.control->blocks_per_segment;
  const unsigned long long end = extent.start + extent.count;
  for (unsigned long long block = extent.start; block < end;) {
    const unsigned long long segment_end = (block / bps + 1) * bps;
    const unsigned long long next = segment_end < end ? segment_end : end;
    release_in_segment(bm, block, next);
    block = next;
  }
}

// Claims the n free bits a reservation set aside in `shard`'s segments. Without room for the
// extents it gives everything back, reservation included, and returns false.
__device__ __forceinline__ bool claim(const ShardedBitmap& bm, unsigned int shard,
                                      unsigned long long n, ShardedExtent* extents,
                                      unsigned int max_extents, unsigned int* extent_count) {
  ShardedShardHeader* header = &bm.shards[shard];
  const unsigned int bps = bm.control->blocks_per_segment;
  const unsigned int words_per_segment = bm.control->words_per_segment;
  const unsigned int begin = load(&header->list_begin);
  const unsigned int len = load(&header->list_len);
  const unsigned long long hint = load(&header->scan_hint);
  unsigned int position = (unsigned int)(hint >> 32) % len;
  unsigned int word_in_segment = (unsigned int)hint;
  unsigned long long remaining = n;
  // The reservation guarantees enough unclaimed bits; a pass misses them only while racing
  // claimers and frees move them, so keep going round.
  for (;;) {
    const unsigned int segment = load(&bm.shard_segments[begin + position]);
    if (load(&bm.segment_used[segment]) < bps) {
      unsigned long long claimed = 0;
      bool overflow = false;
      for (; word_in_segment < words_per_segment; ++word_in_segment) {
        unsigned long long* word =
            &bm.bitmap[(unsigned long long)segment * words_per_segment + word_in_segment];
        const unsigned long long base =
            (unsigned long long)segment * bps + (unsigned long long)word_in_segment * 64;
        unsigned long long current = load(word);
        while (claimed < remaining && current != ~0ull) {
          const unsigned long long mask = claim_mask(current, remaining - claimed);
          const unsigned long long previous = atomicOr(word, mask);
          unsigned long long gained = mask & ~previous;
          const unsigned long long unrecorded =
              push_runs(extents, max_extents, extent_count, base, gained);
          if (unrecorded != 0) {
            atomicAnd(word, ~unrecorded);
            gained &= ~unrecorded;
            overflow = true;
          }
          claimed += __popcll(gained);
          if (overflow) break;
          current = previous | mask;
        }
        if (overflow || claimed == remaining) break;
      }
      atomicAdd(&bm.segment_used[segment], (unsigned int)claimed);
      remaining -= claimed;
      if (overflow) {
        for (unsigned int i = 0; i < *extent_count; ++i) release(bm, extents[i]);
        *extent_count = 0;
        atomicAdd(&header->free_blocks, n);
        return false;
      }
      if (remaining == 0) {
        atomicExch(&header->scan_hint, (unsigned long long)position << 32 | word_in_segment);
        return true;
      }
    }
    position = (position + 1) % len;
    word_in_segment = 0;
  }
}

}  // namespace sharded_detail

// Allocates n blocks from one shard, by one thread: shard shard_hint % shard_count, or, when it
// cannot hold n, the next shard that can (then SHARDED_OK_SHARD_LOW). Writes at most max_extents
// extents, merged where adjacent, and their number to *extent_count.
__device__ __forceinline__ unsigned int sharded_alloc(const ShardedBitmap& bm,
                                                      unsigned int shard_hint,
                                                      unsigned long long n,
                                                      ShardedExtent* extents,
                                                      unsigned int max_extents,
                                                      unsigned int* extent_count) {
  *extent_count = 0;
  if (n == 0 || max_extents == 0) return SHARDED_INVALID;
  const unsigned int shard_count = bm.control->shard_count;
  const unsigned int home = shard_hint % shard_count;
  for (unsigned int step = 0; step < shard_count; ++step) {
    const unsigned int shard = (home + step) % shard_count;
    sharded_detail::enter(bm, shard);
    bool crossed_low = false;
    if (!sharded_detail::reserve(bm, shard, n, &crossed_low)) {
      sharded_detail::leave(bm, shard);
      continue;
    }
    const bool fits =
        sharded_detail::claim(bm, shard, n, extents, max_extents, extent_count);
    sharded_detail::leave(bm, shard);
    if (!fits) return SHARDED_TOO_FRAGMENTED;
    if (step != 0) atomicExch(&bm.shards[home].low, 1u);
    return crossed_low || step != 0 ? SHARDED_OK_SHARD_LOW : SHARDED_OK;
  }
  atomicExch(&bm.shards[home].low, 1u);
  return SHARDED_NO_SPACE;
}

// Frees blocks [start, start + count). Checks first that every block is in use, so a double
// free changes nothing (unless a racing free of the same blocks clears them in between).
__device__ __forceinline__ unsigned int sharded_free(const ShardedBitmap& bm,
                                                     unsigned long long start,
                                                     unsigned long long count) {
  if (count == 0) return SHARDED_INVALID;
  const unsigned long long total = bm.control->total_blocks;
  if (start >= total || count > total - start) return SHARDED_OUT_OF_RANGE;
  const unsigned long long end = start + count;
  for (unsigned long long block = start; block < end;) {
    unsigned int bit;
    const unsigned long long word = sharded_detail::locate(bm, block, &bit);
    const unsigned long long next = sharded_detail::word_end(bm, block, bit, end);
    const unsigned long long mask = sharded_detail::low_mask(next - block) << bit;
    if ((mask & ~sharded_detail::load(&bm.bitmap[word])) != 0) return SHARDED_DOUBLE_FREE;
    block = next;
  }
  const unsigned long long bps = bm.control->blocks_per_segment;
  bool double_free = false;
  for (unsigned long long block = start; block < end;) {
    const unsigned long long segment = block / bps;
    const unsigned long long segment_end = (segment + 1) * bps < end ? (segment + 1) * bps : end;
    const unsigned int shard = sharded_detail::enter_owner(bm, (unsigned int)segment);
    unsigned long long cleared = 0;
    for (; block < segment_end;) {
      unsigned int bit;
      const unsigned long long word = sharded_detail::locate(bm, block, &bit);
      const unsigned long long next = sharded_detail::word_end(bm, block, bit, segment_end);
      const unsigned long long mask = sharded_detail::low_mask(next - block) << bit;
      const unsigned long long previous = atomicAnd(&bm.bitmap[word], ~mask);
      cleared += __popcll(previous & mask);
      double_free |= (previous & mask) != mask;
      block = next;
    }
    atomicSub(&bm.segment_used[segment], (unsigned int)cleared);
    atomicAdd(&bm.shards[shard].free_blocks, cleared);
    sharded_detail::leave(bm, shard);
  }
  return double_free ? SHARDED_DOUBLE_FREE : SHARDED_OK;
}

// Whether `block` is in use; false for a block past the device.
__device__ __forceinline__ bool sharded_is_allocated(const ShardedBitmap& bm,
                                                     unsigned long long block) {
  if (block >= bm.control->total_blocks) return false;
  unsigned int bit;
  const unsigned long long word = sharded_detail::locate(bm, block, &bit);
  return (sharded_detail::load(&bm.bitmap[word]) >> bit & 1) != 0;
}

// The SM this thread runs on.
__device__ __forceinline__ unsigned int sharded_sm_id() {
  unsigned int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// Shared memory of one block for sharded_alloc_coalesced.
struct ShardedBlockScratch {
  unsigned long long scan[SHARDED_MAX_BLOCK_THREADS];
  ShardedExtent extents[SHARDED_MAX_EXTENTS];
  unsigned int extent_count;
  unsigned int status;
};

// One thread's part of a block allocation: blocks [first, first + count) of the block's grant,
// read with sharded_grant_block.
struct ShardedGrant {
  unsigned int status;  // sharded_alloc's status, the same for every thread
  unsigned long long first;
  unsigned long long count;  // the thread's need, or 0 when the allocation failed
};

// Block-wide coalesced allocation: every thread of the block calls it with its need (possibly 0);
// thread 0 allocates the sum from its SM's shard. The grant stays readable in `scratch` until
// the next call.
__device__ __forceinline__ ShardedGrant sharded_alloc_coalesced(const ShardedBitmap& bm,
                                                                unsigned int need,
                                                                ShardedBlockScratch& scratch) {
  const unsigned int threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  __syncthreads();  // readers of the previous grant are done with the scratch
  scratch.scan[tid] = need;
  __syncthreads();
  // Inclusive Hillis-Steele scan.
  for (unsigned int offset = 1; offset < threads; offset <<= 1) {
    const unsigned long long left = tid >= offset ? scratch.scan[tid - offset] : 0;
    __syncthreads();
    scratch.scan[tid] += left;
    __syncthreads();
  }
  if (tid == 0) {
    const unsigned long long total = scratch.scan[threads - 1];
    scratch.extent_count = 0;
    scratch.status = total == 0 ? (unsigned int)SHARDED_OK
                                : sharded_alloc(bm, sharded_sm_id(), total, scratch.extents,
                                                SHARDED_MAX_EXTENTS, &scratch.extent_count);
  }
  __syncthreads();
  ShardedGrant grant;
  grant.status = scratch.status;
  grant.first = scratch.scan[tid] - need;
  const bool granted = grant.status == SHARDED_OK || grant.status == SHARDED_OK_SHARD_LOW;
  grant.count = granted ? need : 0;
  return grant;
}

// Block number of the index-th block of the block's grant; ~0 past its end.
__device__ __forceinline__ unsigned long long sharded_grant_block(
    const ShardedBlockScratch& scratch, unsigned long long index) {
  for (unsigned int i = 0; i < scratch.extent_count; ++i) {
    if (index < scratch.extents[i].count) return scratch.extents[i].start + index;
    index -= scratch.extents[i].count;
  }
  return ~0ull;
}

#endif  // GPU_STORAGE_SHARDED_BITMAP_CUH
