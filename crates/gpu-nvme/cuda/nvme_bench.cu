// nvme-bench's GPU initiator, in the spirit of BaM's nvm-block-bench: every warp drives one
// queue (warp w uses queue w % num_queues), each lane keeps one command in flight, and the
// warp submits and completes its 32 commands together (one doorbell per warp).
//
// Launch: any grid of whole warps (blockDim.x a multiple of 32); one argument, a pointer to
// `bench_params` in GPU memory.
// The host sets `*stop_flag = 1` to end a timed run; `max_ops_per_thread` ends a counted one.
// Counters (unsigned long long[6]): ops completed, error completions, verify failures, bytes,
// and the nanoseconds warps spent submitting and waiting (summed over warps).
// Latency histogram: `LAT_BUCKETS` buckets of 1 us (the last one holds everything longer),
// one sample per warp and iteration (submission of its 32 commands to their completion).
#include "nvme.cuh"

#define LAT_BUCKETS 8192

struct bench_params {
    unsigned long long queues;              // const nvme_queue[num_queues]
    unsigned long long data;                // GPU memory: one io_bytes region per thread
    unsigned long long counters;            // unsigned long long[6]
    unsigned long long latency_hist;        // unsigned long long[LAT_BUCKETS]
    unsigned long long stop_flag;           // unsigned int in host memory mapped into the GPU
    unsigned long long lba_count;           // blocks the benchmark may touch
    unsigned long long seed;
    unsigned long long max_ops_per_thread;  // 0: run until the stop flag
    unsigned int num_queues;
    unsigned int blocks_per_io;
    unsigned int op;         // 0 read, 1 write, 2 mixed (half and half)
    unsigned int pattern;    // 0 random, 1 sequential
    unsigned int data_mode;  // 0 none (null commands), 1 bounce (GPU pull/push), 2 direct (copy engine)
    unsigned int verify;     // reads: check every byte; writes: write the pattern
    unsigned int load_kind;  // bounce reads: 0 ld.cv, 1 ld.cg, 2 plain, 3 ld.global.nc
    unsigned int _pad;
};
static_assert(sizeof(bench_params) == 96, "bench_params must match nvme-bench's BenchParams");

// The content every benchmark file holds: the 8-byte word at byte offset `o` is pattern(o).
__device__ __forceinline__ unsigned long long bench_pattern(unsigned long long offset) {
    unsigned long long x = offset * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29) ^ 0x5DEECE66Dull;
}

__device__ __forceinline__ unsigned long long bench_next(unsigned long long& s) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
}

__device__ __forceinline__ unsigned long long bench_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ uint4 bench_load(const uint4* p, unsigned int kind) {
    switch (kind) {
        case 1: return __ldcg(p);
        case 2: return *p;
        case 3: return __ldg(p);
        default: return __ldcv(p);
    }
}

// The whole warp copies each lane's bounce slot in turn (coalesced 512-byte rows).
__device__ inline void bench_pull_slots(const nvme_queue& q, unsigned long long ticket, unsigned char* dst,
                                        unsigned int bytes, unsigned int kind) {
    const unsigned int lane = nvme_lane();
    const unsigned long long my_slot = (unsigned long long)nvme_slot(q, nvme_slot_of(q, ticket));
    const unsigned long long my_dst = (unsigned long long)dst;
    for (int src = 0; src < 32; src++) {
        const uint4* s = (const uint4*)__shfl_sync(0xffffffffu, my_slot, src);
        uint4* d = (uint4*)__shfl_sync(0xffffffffu, my_dst, src);
        for (unsigned int i = lane; i < bytes / 16; i += 32) d[i] = bench_load(s + i, kind);
    }
}

extern "C" __global__ void nvme_bench(const bench_params* params) {
    const bench_params p = *params;
    const unsigned int lane = nvme_lane();
    const unsigned long long thread = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long threads = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long warp = thread / 32;
    const nvme_queue q = ((const nvme_queue*)p.queues)[warp % p.num_queues];
    const unsigned int io_bytes = p.blocks_per_io << q.lba_shift;
    unsigned char* buf = (unsigned char*)p.data + thread * io_bytes;
    const unsigned long long span = p.lba_count / p.blocks_per_io;  // I/O-sized units
    unsigned long long rng = p.seed ^ (thread * 0x2545F4914F6CDD1Dull + 1);
    unsigned long long ops = 0, errors = 0, bad = 0, submit_ns = 0, wait_ns = 0;
    unsigned long long* hist = (unsigned long long*)p.latency_hist;
    for (unsigned long long iter = 0;; iter++) {
        unsigned int stop = 0;
        if (lane == 0 && (iter & 15) == 0) stop = nvme_ld_sys((const unsigned int*)p.stop_flag);
        stop = __shfl_sync(0xffffffffu, stop, 0);
        if (stop != 0 || (p.max_ops_per_thread != 0 && iter >= p.max_ops_per_thread)) break;
        const unsigned long long unit =
            p.pattern == 1 ? (thread + iter * threads) % span : bench_next(rng) % span;
        const unsigned long long lba = unit * p.blocks_per_io;
        const bool write = p.op == 1 || (p.op == 2 && (bench_next(rng) & 1ull));
        if (write && p.verify && p.data_mode != 0) {
            unsigned long long* w = (unsigned long long*)buf;
            for (unsigned int i = 0; i < io_bytes / 8; i++) w[i] = bench_pattern((lba << q.lba_shift) + i * 8ull);
        }
        const unsigned long long t0 = bench_now();
        nvme_sqe cmd = nvme_rw_command(write ? NVME_OPC_WRITE : NVME_OPC_READ, q.nsid, lba, p.blocks_per_io);
        nvme_data_mode mode = NVME_DATA_AS_GIVEN;
        if (p.data_mode == 1) mode = NVME_DATA_BOUNCE;
        if (p.data_mode == 2) {
            mode = NVME_DATA_DIRECT;
            cmd.prp1 = (unsigned long long)buf;
        }
        const unsigned long long t = nvme_submit_warp(q, cmd, 0xffffffffu, mode, write ? buf : nullptr);
        const unsigned long long t_submitted = bench_now();
        const unsigned int status = nvme_wait_warp(q, t, 0xffffffffu);
        if (lane == 0) {
            submit_ns += t_submitted - t0;
            wait_ns += bench_now() - t_submitted;
        }
        if (p.data_mode == 1) {
            // Every lane takes part in the pull, so the warp agrees on which slots to copy.
            const bool pull = status == 0 && !write;
            if (__all_sync(0xffffffffu, pull)) {
                bench_pull_slots(q, t, buf, io_bytes, p.load_kind);
            } else if (pull) {
                nvme_copy_from_slot(buf, nvme_slot(q, nvme_slot_of(q, t)), io_bytes);
            }
            __syncwarp();
        }
        nvme_release_warp(q, t);
        const unsigned long long t1 = bench_now();
        if (lane == 0) {
            unsigned long long us = (t1 - t0) / 1000;
            atomicAdd(&hist[us < LAT_BUCKETS ? us : LAT_BUCKETS - 1], 1ull);
        }
        if (status != 0) {
            errors++;
        } else {
            ops++;
            if (p.verify && !write && p.data_mode != 0) {
                const unsigned long long* w = (const unsigned long long*)buf;
                for (unsigned int i = 0; i < io_bytes / 8; i++) {
                    if (w[i] != bench_pattern((lba << q.lba_shift) + i * 8ull)) {
                        bad++;
                        break;
                    }
                }
                // Poison the buffer so that a missed copy next time cannot pass the check.
                unsigned long long* x = (unsigned long long*)buf;
                for (unsigned int i = 0; i < io_bytes / 8; i++) x[i] = 0xDEADDEADDEADDEADull;
            }
        }
    }
    unsigned long long* c = (unsigned long long*)p.counters;
    atomicAdd(&c[0], ops);
    atomicAdd(&c[1], errors);
    atomicAdd(&c[2], bad);
    atomicAdd(&c[3], ops * io_bytes);
    if (lane == 0) {
        atomicAdd(&c[4], submit_ns);
        atomicAdd(&c[5], wait_ns);
    }
}
