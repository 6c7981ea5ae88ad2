// GPU test of sharded_bitmap.cuh: many thread blocks allocate concurrently with
// sharded_alloc_coalesced, mark every granted block in an owner array with atomicAdd, free half of
// their grants, and a last kernel checks the bitmap against the marks and the free counts.
//
// Launch contract (the allocator lives in __device__ globals; `results` is a device array of
// SHARDED_TEST_RESULT_COUNT unsigned ints, zeroed by the first kernel), in this order, on one
// stream:
//   1. sharded_test_init<<<1, 1024>>>(results)
//        builds a 4 GiB device (1 Mi blocks, 2048 segments of 512 blocks, 132 shards; the first
//        64 blocks of every third segment in use) and checks single-thread alloc/free paths.
//   2. sharded_test_alloc<<<528, 256>>>(results)
//        each block runs 4 rounds; every thread needs 0-3 blocks per round; even rounds are freed.
//        Demand at any time stays below 2/3 of the free space.
//   3. sharded_test_verify<<<4096, 256>>>(results)   (one thread per block of the device)
// Then read `results`: results[0] counts failed checks and must be 0; results[1] counts passed
// checks and must be at least 528 * 4 (one per successful block allocation); results[2..5] split
// the failures into blocks handed out twice, failed allocations, failed frees and bitmap/marks or
// accounting mismatches.
#include "sharded_bitmap.cuh"

constexpr unsigned long long TEST_TOTAL_BLOCKS = 1ull << 20;
constexpr unsigned int TEST_BLOCKS_PER_SEGMENT = 512;
constexpr unsigned int TEST_WORDS_PER_SEGMENT = TEST_BLOCKS_PER_SEGMENT / 64;
constexpr unsigned int TEST_SEGMENTS = (unsigned int)(TEST_TOTAL_BLOCKS / TEST_BLOCKS_PER_SEGMENT);
constexpr unsigned int TEST_SHARDS = 132;
constexpr unsigned int TEST_ROUNDS = 4;

enum ShardedTestResult : unsigned int {
  SHARDED_TEST_FAILURES = 0,
  SHARDED_TEST_PASSES = 1,
  SHARDED_TEST_DUPLICATES = 2,
  SHARDED_TEST_ALLOC_FAILURES = 3,
  SHARDED_TEST_FREE_FAILURES = 4,
  SHARDED_TEST_MISMATCHES = 5,
  SHARDED_TEST_RESULT_COUNT = 6,
};

__device__ ShardedControl g_control;
__device__ ShardedShardHeader g_shards[TEST_SHARDS];
__device__ unsigned long long g_bitmap[TEST_SEGMENTS * TEST_WORDS_PER_SEGMENT];
__device__ unsigned int g_segment_used[TEST_SEGMENTS];
__device__ unsigned int g_segment_owner[TEST_SEGMENTS];
__device__ unsigned int g_shard_segments[TEST_SEGMENTS];
// Holders per block: 1 while some thread holds it.
__device__ unsigned int g_marks[TEST_TOTAL_BLOCKS];

__device__ ShardedBitmap test_bitmap() {
  ShardedBitmap bm;
  bm.control = &g_control;
  bm.shards = g_shards;
  bm.bitmap = g_bitmap;
  bm.segment_used = g_segment_used;
  bm.segment_owner = g_segment_owner;
  bm.shard_segments = g_shard_segments;
  return bm;
}

__device__ bool initially_used(unsigned long long block) {
  return (block / TEST_BLOCKS_PER_SEGMENT) % 3 == 0 && block % TEST_BLOCKS_PER_SEGMENT < 64;
}

__device__ void check(unsigned int* results, bool ok, unsigned int kind) {
  if (ok) {
    atomicAdd(&results[SHARDED_TEST_PASSES], 1u);
  } else {
    atomicAdd(&results[SHARDED_TEST_FAILURES], 1u);
    atomicAdd(&results[kind], 1u);
  }
}

// First segment of shard `shard`: segment s belongs to shard s * SHARDS / SEGMENTS.
__device__ unsigned int first_segment(unsigned int shard) {
  return (shard * TEST_SEGMENTS + TEST_SHARDS - 1) / TEST_SHARDS;
}

extern "C" __global__ void sharded_test_init(unsigned int* results) {
  const unsigned int tid = threadIdx.x, threads = blockDim.x;
  for (unsigned int i = tid; i < SHARDED_TEST_RESULT_COUNT; i += threads) results[i] = 0;
  for (unsigned long long b = tid; b < TEST_TOTAL_BLOCKS; b += threads) g_marks[b] = 0;
  for (unsigned int w = tid; w < TEST_SEGMENTS * TEST_WORDS_PER_SEGMENT; w += threads) {
    const bool used = (w / TEST_WORDS_PER_SEGMENT) % 3 == 0 && w % TEST_WORDS_PER_SEGMENT == 0;
    g_bitmap[w] = used ? ~0ull : 0;
  }
  for (unsigned int s = tid; s < TEST_SEGMENTS; s += threads) {
    g_segment_used[s] = s % 3 == 0 ? 64 : 0;
    g_segment_owner[s] = s * TEST_SHARDS / TEST_SEGMENTS;
    g_shard_segments[s] = s;
  }
  const unsigned long long used_total = 64ull * ((TEST_SEGMENTS + 2) / 3);
  const unsigned long long fair_share = (TEST_TOTAL_BLOCKS - used_total) / TEST_SHARDS;
  for (unsigned int shard = tid; shard < TEST_SHARDS; shard += threads) {
    const unsigned int begin = first_segment(shard), end = first_segment(shard + 1);
    unsigned long long free = 0;
    for (unsigned int s = begin; s < end; ++s) {
      free += TEST_BLOCKS_PER_SEGMENT - (s % 3 == 0 ? 64 : 0);
    }
    ShardedShardHeader& header = g_shards[shard];
    header.free_blocks = free;
    header.low_watermark = fair_share / 20;
    header.scan_hint = 0;
    header.list_begin = begin;
    header.list_len = end - begin;
    header.active = 0;
    header.low = 0;
  }
  if (tid == 0) {
    g_control.total_blocks = TEST_TOTAL_BLOCKS;
    g_control.segment_count = TEST_SEGMENTS;
    g_control.blocks_per_segment = TEST_BLOCKS_PER_SEGMENT;
    g_control.words_per_segment = TEST_WORDS_PER_SEGMENT;
    g_control.shard_count = TEST_SHARDS;
    g_control.rebalancing = 0;
    g_control.rebalance_count = 0;
  }
  __syncthreads();
  if (tid != 0) return;

  // Single-thread paths on shard 0 (segments 0-15; segments 0 and 3 start with 64 used blocks).
  const ShardedBitmap bm = test_bitmap();
  ShardedExtent extents[4];
  unsigned int count = 7;
  check(results, sharded_alloc(bm, 0, 0, extents, 4, &count) == SHARDED_INVALID && count == 0,
        SHARDED_TEST_ALLOC_FAILURES);
  // 2000 blocks need two runs (64..1536 and 1600..2128): one extent is too few.
  const unsigned long long shard_free = g_shards[0].free_blocks;
  check(results, sharded_alloc(bm, 0, 2000, extents, 1, &count) == SHARDED_TOO_FRAGMENTED,
        SHARDED_TEST_ALLOC_FAILURES);
  check(results, count == 0 && g_shards[0].free_blocks == shard_free && g_segment_used[0] == 64 &&
                     !sharded_is_allocated(bm, 64),
        SHARDED_TEST_MISMATCHES);
  const unsigned int status = sharded_alloc(bm, TEST_SHARDS, 2000, extents, 4, &count);
  check(results, status == SHARDED_OK && count == 2 && extents[0].start == 64 &&
                     extents[0].count == 1472 && extents[1].start == 1600 &&
                     extents[1].count == 528,
        SHARDED_TEST_ALLOC_FAILURES);
  check(results, g_shards[0].free_blocks == shard_free - 2000 && sharded_is_allocated(bm, 2127) &&
                     !sharded_is_allocated(bm, 2128),
        SHARDED_TEST_MISMATCHES);
  check(results, sharded_free(bm, extents[0].start, extents[0].count) == SHARDED_OK &&
                     sharded_free(bm, extents[1].start, extents[1].count) == SHARDED_OK,
        SHARDED_TEST_FREE_FAILURES);
  check(results, g_shards[0].free_blocks == shard_free && g_segment_used[0] == 64 &&
                     g_segment_used[1] == 0 && !sharded_is_allocated(bm, 64),
        SHARDED_TEST_MISMATCHES);
  check(results, sharded_free(bm, 64, 10) == SHARDED_DOUBLE_FREE, SHARDED_TEST_FREE_FAILURES);
  check(results, sharded_free(bm, 60, 10) == SHARDED_DOUBLE_FREE && sharded_is_allocated(bm, 60),
        SHARDED_TEST_FREE_FAILURES);
  check(results, sharded_free(bm, TEST_TOTAL_BLOCKS - 1, 2) == SHARDED_OUT_OF_RANGE &&
                     sharded_free(bm, 0, 0) == SHARDED_INVALID,
        SHARDED_TEST_FREE_FAILURES);
}

__device__ unsigned int test_need(unsigned int block, unsigned int thread, unsigned int round) {
  unsigned int mixed = block * 2654435761u ^ thread * 40503u ^ round * 2246822519u;
  mixed ^= mixed >> 15;
  mixed *= 2246822519u;
  mixed ^= mixed >> 13;
  return mixed % 4;
}

extern "C" __global__ void sharded_test_alloc(unsigned int* results) {
  __shared__ ShardedBlockScratch scratch;
  const ShardedBitmap bm = test_bitmap();
  const unsigned int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  for (unsigned int round = 0; round < TEST_ROUNDS; ++round) {
    const unsigned int need = test_need(blockIdx.x, tid, round);
    const ShardedGrant grant = sharded_alloc_coalesced(bm, need, scratch);
    const bool granted = grant.status == SHARDED_OK || grant.status == SHARDED_OK_SHARD_LOW;
    if (tid == 0) check(results, granted, SHARDED_TEST_ALLOC_FAILURES);
    for (unsigned long long i = 0; i < grant.count; ++i) {
      const unsigned long long block = sharded_grant_block(scratch, grant.first + i);
      if (block >= TEST_TOTAL_BLOCKS) {
        check(results, false, SHARDED_TEST_ALLOC_FAILURES);
        continue;
      }
      const unsigned int holders = atomicAdd(&g_marks[block], 1u);
      if (holders != 0 || initially_used(block)) check(results, false, SHARDED_TEST_DUPLICATES);
      if (!sharded_is_allocated(bm, block)) check(results, false, SHARDED_TEST_MISMATCHES);
    }
    if (round % 2 != 0) continue;
    // Give the grant back run by run.
    unsigned long long run_start = 0, run_len = 0;
    for (unsigned long long i = 0; i <= grant.count; ++i) {
      const unsigned long long block =
          i < grant.count ? sharded_grant_block(scratch, grant.first + i) : ~0ull;
      if (run_len != 0 && block == run_start + run_len) {
        ++run_len;
        continue;
      }
      if (run_len != 0) {
        for (unsigned long long b = run_start; b < run_start + run_len; ++b) {
          atomicSub(&g_marks[b], 1u);
        }
        if (sharded_free(bm, run_start, run_len) != SHARDED_OK) {
          check(results, false, SHARDED_TEST_FREE_FAILURES);
        }
      }
      run_start = block;
      run_len = block < TEST_TOTAL_BLOCKS ? 1 : 0;
    }
  }
}

extern "C" __global__ void sharded_test_verify(unsigned int* results) {
  const ShardedBitmap bm = test_bitmap();
  const unsigned long long block = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (block < TEST_TOTAL_BLOCKS) {
    const unsigned int holders = g_marks[block];
    const bool initial = initially_used(block);
    const bool consistent = holders <= 1 && !(initial && holders != 0) &&
                            sharded_is_allocated(bm, block) == (initial || holders == 1);
    if (!consistent) check(results, false, SHARDED_TEST_MISMATCHES);
  }
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  // Accounting: free counts and used counts agree with the bitmap, and no shard is entered.
  unsigned long long free_sum = 0, in_use = 0;
  bool segments_agree = true, shards_idle = true;
  for (unsigned int shard = 0; shard < TEST_SHARDS; ++shard) {
    free_sum += g_shards[shard].free_blocks;
    shards_idle &= g_shards[shard].active == 0;
  }
  for (unsigned int s = 0; s < TEST_SEGMENTS; ++s) {
    unsigned int used = 0;
    for (unsigned int w = 0; w < TEST_WORDS_PER_SEGMENT; ++w) {
      used += __popcll(g_bitmap[s * TEST_WORDS_PER_SEGMENT + w]);
    }
    segments_agree &= used == g_segment_used[s];
    in_use += used;
  }
  check(results, free_sum == TEST_TOTAL_BLOCKS - in_use, SHARDED_TEST_MISMATCHES);
  check(results, segments_agree && shards_idle, SHARDED_TEST_MISMATCHES);
}
