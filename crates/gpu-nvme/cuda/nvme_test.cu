// Device tests of the block API in nvme.cuh (run by tests/gpu.rs on a GPU machine).
//
// nvme_test_rw: launch with whole warps; warp w uses queues[w % num_queues]. Each thread owns
// the LBA range [thread * blocks_per_thread, +blocks_per_thread) and, in `rounds` rounds:
// writes the test pattern for (round, lba) with nvme_write, reads it back with nvme_read (bounce
// slot) and with nvme_read_direct (copy engine into `direct_buf`), and counts every 8-byte word
// that differs in fails[0] (bounce) and fails[1] (direct); fails[2] counts error statuses.
// Consecutive rounds reuse the same bounce slots with new contents, so stale data would show.
#include "nvme.cuh"

__device__ __forceinline__ unsigned long long test_word(unsigned long long round, unsigned long long byte) {
    unsigned long long x = (byte + 1) * 0x9E3779B97F4A7C15ull ^ (round << 56) ^ (round * 0xD1B54A32D192ED03ull);
    return x ^ (x >> 31);
}

extern "C" __global__ void nvme_test_rw(const nvme_queue* queues, unsigned int num_queues, unsigned char* src_buf,
                                        unsigned char* dst_buf, unsigned char* direct_buf,
                                        unsigned int blocks_per_thread, unsigned int rounds,
                                        unsigned long long* fails) {
    const unsigned long long thread = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long warp = thread / 32;
    const nvme_queue q = queues[warp % num_queues];
    const unsigned int block = 1u << q.lba_shift;
    const unsigned int bytes = block * blocks_per_thread;
    unsigned long long* src = (unsigned long long*)(src_buf + thread * bytes);
    unsigned long long* dst = (unsigned long long*)(dst_buf + thread * bytes);
    unsigned long long* direct = (unsigned long long*)(direct_buf + thread * bytes);
    const unsigned long long lba = thread * blocks_per_thread;
    for (unsigned int round = 0; round < rounds; round++) {
        for (unsigned int i = 0; i < bytes / 8; i++) {
            src[i] = test_word(round, (lba << q.lba_shift) + i * 8ull);
            dst[i] = 0;
            direct[i] = 0;
        }
        unsigned int st = nvme_write(q, src, lba, blocks_per_thread, 0xffffffffu);
        st |= nvme_read(q, dst, lba, blocks_per_thread, 0xffffffffu);
        st |= nvme_read_direct(q, direct, lba, blocks_per_thread, 0xffffffffu);
        if (st != 0) atomicAdd(&fails[2], 1ull);
        unsigned long long bad_bounce = 0, bad_direct = 0;
        for (unsigned int i = 0; i < bytes / 8; i++) {
            const unsigned long long want = test_word(round, (lba << q.lba_shift) + i * 8ull);
            bad_bounce += dst[i] != want;
            bad_direct += direct[i] != want;
        }
        if (bad_bounce) atomicAdd(&fails[0], bad_bounce);
        if (bad_direct) atomicAdd(&fails[1], bad_direct);
    }
}
