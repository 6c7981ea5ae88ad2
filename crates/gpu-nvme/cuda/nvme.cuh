// Device side of gpu-nvme's queue pairs: BaM's ticket protocol for GPU threads.
//
// Mirrors `crates/gpu-nvme/src/queue.rs` (QueueDescriptor, QueueState): the rings and doorbells
// live in page-locked host memory mapped into the GPU (the controller is host software); the
// protocol state (tickets, turns, marks, locks) lives in GPU memory, so the GPU's atomics stay
// on the device. See queue.rs for the protocol; this file follows it step by step.
//
// Memory-model notes:
// - Host-written words (CQEs, the stop flag) are read with `ld.relaxed.sys` so that no cache
//   returns an old copy; host-read words (SQEs, doorbells) are written before a
//   `__threadfence_system()`.
// - Data in a bounce slot is read after the CQE was seen and a fence; `nvme_copy_from_slot`
//   uses `ld.global.cv` ("fetch again") loads, which the tests check with a fresh pattern every
//   time a slot is reused.
#ifndef GPU_NVME_NVME_CUH
#define GPU_NVME_NVME_CUH

#include "nvme_spec.cuh"

// NVME_FULL_FENCES=1 puts a full system-scope fence (membar.sys) everywhere ordering towards the
// host matters, instead of release stores; kept as a compile-time switch for measurements.
#ifndef NVME_FULL_FENCES
#define NVME_FULL_FENCES 0
#endif

struct nvme_queue {
    unsigned long long sq;           // SQ ring: depth x 64 B (host memory)
    unsigned long long cq;           // CQ ring: depth x 16 B (host memory)
    unsigned long long sq_doorbell;  // u32 (host memory)
    unsigned long long cq_doorbell;  // u32 (host memory)
    unsigned long long state;        // nvme_queue_state (GPU memory)
    unsigned long long turns;        // u32[depth] (GPU memory)
    unsigned long long sq_marks;     // u32[depth] (GPU memory)
    unsigned long long cq_marks;     // u32[depth] (GPU memory)
    unsigned long long staging;      // bounce slots: depth x staging_slot_bytes (GPU's address)
    unsigned long long staging_iova; // the same slots as the controller addresses them
    unsigned int depth;
    unsigned int depth_log2;
    unsigned int qid;
    unsigned int nsid;
    unsigned int staging_slot_bytes;
    unsigned int lba_shift;
};
static_assert(sizeof(nvme_queue) == 104, "nvme_queue must match QueueDescriptor");
static_assert(NVME_OFFSETOF(nvme_queue, staging) == 64, "layout");
static_assert(NVME_OFFSETOF(nvme_queue, staging_iova) == 72, "layout");
static_assert(NVME_OFFSETOF(nvme_queue, depth) == 80, "layout");
static_assert(NVME_OFFSETOF(nvme_queue, qid) == 88, "layout");
static_assert(NVME_OFFSETOF(nvme_queue, staging_slot_bytes) == 96, "layout");
static_assert(NVME_OFFSETOF(nvme_queue, lba_shift) == 100, "layout");

struct __align__(64) nvme_queue_state {
    unsigned long long sq_ticket;
    unsigned long long _pad0[7];
    unsigned long long sq_tail;
    unsigned int sq_tail_lock;
    unsigned int _pad1[13];
    unsigned long long cq_head;
    unsigned int cq_head_lock;
    unsigned int _pad2[13];
};
static_assert(sizeof(nvme_queue_state) == 192, "nvme_queue_state must match QueueState");
static_assert(NVME_OFFSETOF(nvme_queue_state, sq_tail) == 64, "layout");
static_assert(NVME_OFFSETOF(nvme_queue_state, sq_tail_lock) == 72, "layout");
static_assert(NVME_OFFSETOF(nvme_queue_state, cq_head) == 128, "layout");
static_assert(NVME_OFFSETOF(nvme_queue_state, cq_head_lock) == 136, "layout");

// ---- loads and stores with an explicit scope -------------------------------------------------

__device__ __forceinline__ unsigned int nvme_ld_sys(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void nvme_st_sys(unsigned int* p, unsigned int v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// Doorbell write that orders every write this thread has observed before it, at system scope
// (fence.acq_rel.sys + store): what the host must see before it fetches SQEs or reuses CQ slots.
__device__ __forceinline__ void nvme_st_release_sys(unsigned int* p, unsigned int v) {
#if NVME_FULL_FENCES
    __threadfence_system();
    nvme_st_sys(p, v);
#else
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}
__device__ __forceinline__ unsigned int nvme_ld_gpu(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long nvme_ld_gpu64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void nvme_st_gpu(unsigned int* p, unsigned int v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void nvme_st_gpu64(unsigned long long* p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ unsigned int nvme_lane() {
    unsigned int lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

__device__ __forceinline__ nvme_queue_state* nvme_state(const nvme_queue& q) {
    return (nvme_queue_state*)q.state;
}
__device__ __forceinline__ unsigned int* nvme_turn(const nvme_queue& q, unsigned int slot) {
    return (unsigned int*)q.turns + slot;
}
__device__ __forceinline__ unsigned int* nvme_sq_mark(const nvme_queue& q, unsigned int slot) {
    return (unsigned int*)q.sq_marks + slot;
}
__device__ __forceinline__ unsigned int* nvme_cq_mark(const nvme_queue& q, unsigned int slot) {
    return (unsigned int*)q.cq_marks + slot;
}
__device__ __forceinline__ unsigned char* nvme_slot(const nvme_queue& q, unsigned int slot) {
    return (unsigned char*)q.staging + (unsigned long long)slot * q.staging_slot_bytes;
}
__device__ __forceinline__ unsigned int nvme_slot_of(const nvme_queue& q, unsigned long long ticket) {
    return (unsigned int)(ticket & (q.depth - 1));
}

// The lanes of `mask` copy every lane's `bytes` from `src` (GPU memory) into its bounce slot
// together, one lane's data at a time, so host memory sees full 512-byte rows instead of each
// lane's scattered 16-byte stores. All lanes of `mask` must call it.
__device__ inline void nvme_push_slots_warp(unsigned char* slot, const void* src, unsigned int bytes,
                                            unsigned int mask) {
    const unsigned int rank = __popc(mask & ((1u << nvme_lane()) - 1u));
    const unsigned int width = __popc(mask);
    __syncwarp(mask);
    for (unsigned int m = mask; m != 0; m &= m - 1) {
        const int owner = __ffs(m) - 1;
        uint4* d = (uint4*)__shfl_sync(mask, (unsigned long long)slot, owner);
        const uint4* s = (const uint4*)__shfl_sync(mask, (unsigned long long)src, owner);
        const unsigned int n = __shfl_sync(mask, bytes, owner) / 16;
        for (unsigned int i = rank; i < n; i += width) d[i] = s[i];
    }
    __syncwarp(mask);
}

// ---- submission --------------------------------------------------------------------------------

// Walks consecutive marked SQ slots and rings the doorbell once for all of them. One thread.
__device__ inline void nvme_publish_tail(const nvme_queue& q) {
    nvme_queue_state* st = nvme_state(q);
    const unsigned long long mask = q.depth - 1;
    for (;;) {
        if (atomicCAS(&st->sq_tail_lock, 0u, 1u) != 0u) return;  // the holder re-checks our mark
        __threadfence();
        unsigned long long start = nvme_ld_gpu64(&st->sq_tail);
        unsigned long long tail = start;
        while (nvme_ld_gpu(nvme_sq_mark(q, (unsigned int)(tail & mask))) == 1u) {
            nvme_st_gpu(nvme_sq_mark(q, (unsigned int)(tail & mask)), 0u);
            tail++;
        }
        if (tail != start) {
            nvme_st_gpu64(&st->sq_tail, tail);
            // Every SQE up to `tail` (observed through its mark) is visible before the doorbell.
            nvme_st_release_sys((unsigned int*)q.sq_doorbell, (unsigned int)(tail & mask));
        }
        __threadfence();
        atomicExch(&st->sq_tail_lock, 0u);
        __threadfence();
        if (nvme_ld_gpu(nvme_sq_mark(q, (unsigned int)(tail & mask))) != 1u) return;
    }
}

// How a command's data pointer is filled once its slot is known.
enum nvme_data_mode : unsigned int {
    NVME_DATA_AS_GIVEN = 0,  // the caller's PRPs stand (or there is no data)
    NVME_DATA_BOUNCE = 1,    // the data goes through the slot's bounce buffer in host memory
    NVME_DATA_DIRECT = 2,    // PRP1 names GPU memory; a PRP list, if needed, goes in the slot
};

// Fills PRP1/PRP2 of `cmd` for `bytes` at bus address `addr`, writing a PRP list into
// `list` / `list_iova` when more than two 4 KiB pages are spanned.
__device__ inline void nvme_fill_prps(nvme_sqe& cmd, unsigned long long addr, unsigned int bytes,
                                      unsigned long long* list, unsigned long long list_iova) {
    cmd.prp1 = addr;
    const unsigned long long first = 4096 - (addr & 4095);
    if (bytes <= first) {
        cmd.prp2 = 0;
    } else if (bytes <= first + 4096) {
        cmd.prp2 = addr + first;
    } else {
        unsigned int n = 0;
        for (unsigned long long page = addr + first; page < addr + bytes; page += 4096) list[n++] = page;
        __threadfence_system();
        cmd.prp2 = list_iova;
    }
}

// Warp-cooperative submission: every lane of `mask` (all calling together) submits its own
// `cmd`; the command id is overwritten with the lane's slot. One ticket fetch and one doorbell
// for the whole warp. With NVME_DATA_BOUNCE the PRPs name the lane's bounce slot, and a write's
// data (`write_src`, GPU memory) is copied into it first; with NVME_DATA_DIRECT `cmd.prp1`
// names GPU memory and a PRP list, when needed, is built in the slot. `mode` must be the same on
// every lane of `mask`. Returns the ticket.
__device__ inline unsigned long long nvme_submit_warp(const nvme_queue& q, nvme_sqe cmd, unsigned int mask,
                                                      nvme_data_mode mode = NVME_DATA_AS_GIVEN,
                                                      const void* write_src = nullptr) {
    nvme_queue_state* st = nvme_state(q);
    const unsigned int lane = nvme_lane();
    const int leader = __ffs(mask) - 1;
    const unsigned int rank = __popc(mask & ((1u << lane) - 1u));
    unsigned long long base = 0;
    if ((int)lane == leader) base = atomicAdd(&st->sq_ticket, (unsigned long long)__popc(mask));
    base = __shfl_sync(mask, base, leader);
    const unsigned long long t = base + rank;
    const unsigned int slot = nvme_slot_of(q, t);
    const unsigned int round = (unsigned int)(t >> q.depth_log2);
    unsigned int ns = 32;
    // Credit: never more than depth - 1 commands between the CQ head and the newest ticket.
    while (t >= nvme_ld_gpu64(&st->cq_head) + q.depth - 1) {
        __nanosleep(ns);
        if (ns < 1024) ns <<= 1;
    }
    // Turn: the previous user of this slot has consumed its completion and released the slot.
    while (nvme_ld_gpu(nvme_turn(q, slot)) != round) {
        __nanosleep(ns);
        if (ns < 1024) ns <<= 1;
    }
    if (mode != NVME_DATA_AS_GIVEN) {
        const unsigned int bytes = ((cmd.cdw12 & 0xffffu) + 1u) << q.lba_shift;
        unsigned char* bounce = nvme_slot(q, slot);
        const unsigned long long bounce_iova = q.staging_iova + (unsigned long long)slot * q.staging_slot_bytes;
        if (mode == NVME_DATA_BOUNCE) {
            // Every lane takes part in the push; lanes without data to write copy nothing.
            nvme_push_slots_warp(bounce, write_src, write_src != nullptr ? bytes : 0u, mask);
            // A transfer of more than two pages keeps its PRP list in the slot's last page.
            const unsigned int list_at = q.staging_slot_bytes - 4096;
            nvme_fill_prps(cmd, bounce_iova, bytes, (unsigned long long*)(bounce + list_at), bounce_iova + list_at);
        } else {
            nvme_fill_prps(cmd, cmd.prp1, bytes, (unsigned long long*)bounce, bounce_iova);
        }
    }
    cmd.cdw0 = (cmd.cdw0 & 0xffffu) | (slot << 16);
    const uint4* src = (const uint4*)&cmd;
    uint4* dst = (uint4*)((unsigned char*)q.sq + (unsigned long long)slot * 64);
#pragma unroll
    for (int i = 0; i < 4; i++) dst[i] = src[i];
    // Each SQE is ordered before its mark at GPU scope; the tail walker observes the mark and
    // its release store of the doorbell carries the SQE to system scope (fences are cumulative).
#if NVME_FULL_FENCES
    __threadfence_system();
#else
    __threadfence();
#endif
    atomicExch(nvme_sq_mark(q, slot), 1u);
    __threadfence();
    __syncwarp(mask);
    if ((int)lane == leader) nvme_publish_tail(q);
    __syncwarp(mask);
    return t;
}

// Single-thread submission (a warp of one).
__device__ inline unsigned long long nvme_submit(const nvme_queue& q, nvme_sqe cmd) {
    return nvme_submit_warp(q, cmd, 1u << nvme_lane());
}

// ---- completion --------------------------------------------------------------------------------

// Advances the CQ head over consecutive consumed entries and rings the CQ doorbell once.
__device__ inline void nvme_advance_head(const nvme_queue& q) {
    nvme_queue_state* st = nvme_state(q);
    const unsigned long long mask = q.depth - 1;
    for (;;) {
        if (atomicCAS(&st->cq_head_lock, 0u, 1u) != 0u) return;
        __threadfence();
        unsigned long long start = nvme_ld_gpu64(&st->cq_head);
        unsigned long long head = start;
        while (head - start <= mask && nvme_ld_gpu(nvme_cq_mark(q, (unsigned int)(head & mask))) == 1u) head++;
        if (head != start) {
            nvme_st_gpu64(&st->cq_head, head);  // head first: a cleared mark implies the new head
            __threadfence();
            for (unsigned long long j = start; j < head; j++) nvme_st_gpu(nvme_cq_mark(q, (unsigned int)(j & mask)), 0u);
            nvme_st_release_sys((unsigned int*)q.cq_doorbell, (unsigned int)(head & mask));
        }
        __threadfence();
        atomicExch(&st->cq_head_lock, 0u);
        __threadfence();
        if (nvme_ld_gpu(nvme_cq_mark(q, (unsigned int)(head & mask))) != 1u) return;
    }
}

// Warp-cooperative completion: every lane of `mask` waits for its own `ticket`. The lanes read
// the CQ 32 entries at a time from the head, and every posted entry is matched against the
// lanes' command ids with shuffles. Returns the lane's 15-bit status field (0 = success). The
// lane's slot (command id and bounce slot) stays reserved until `nvme_release_warp`.
__device__ inline unsigned int nvme_wait_warp(const nvme_queue& q, unsigned long long ticket, unsigned int mask) {
    nvme_queue_state* st = nvme_state(q);
    const unsigned long long mask_q = q.depth - 1;
    const unsigned int lane = nvme_lane();
    const unsigned int rank = __popc(mask & ((1u << lane) - 1u));
    const unsigned int width = __popc(mask);
    const int leader = __ffs(mask) - 1;
    const unsigned int my_cid = nvme_slot_of(q, ticket);
    bool done = false;
    unsigned int status = 0;
    unsigned int ns = 64;
    while (__any_sync(mask, !done)) {
        const unsigned long long head = nvme_ld_gpu64(&st->cq_head);
        bool progress = false;
        for (unsigned long long w = head; w < head + q.depth; w += width) {
            const unsigned long long j = w + rank;
            const unsigned int* entry = (const unsigned int*)((const unsigned char*)q.cq + (j & mask_q) * 16);
            const unsigned int dw3 = nvme_ld_sys(entry + 3);
            const unsigned int phase = (dw3 >> 16) & 1u;
            const bool posted = phase == (unsigned int)(((j >> q.depth_log2) & 1ull) == 0ull);
            const bool free = posted && nvme_ld_gpu(nvme_cq_mark(q, (unsigned int)(j & mask_q))) == 0u;
            unsigned int candidates = __ballot_sync(mask, free);
            while (candidates) {
                const int src = __ffs(candidates) - 1;
                candidates &= candidates - 1;
                const unsigned int cid = __shfl_sync(mask, dw3 & 0xffffu, src);
                const unsigned int st_field = __shfl_sync(mask, dw3 >> 17, src);
                const unsigned long long jj = __shfl_sync(mask, j, src);
                if (!done && cid == my_cid && jj >= nvme_ld_gpu64(&st->cq_head)) {
                    atomicExch(nvme_cq_mark(q, (unsigned int)(jj & mask_q)), 1u);
                    status = st_field;
                    done = true;
                }
            }
            if (__any_sync(mask, free)) progress = true;
            if (!__all_sync(mask, posted)) break;  // the rest of the ring is not posted yet
        }
        __threadfence();
        if (progress) {
            __syncwarp(mask);
            if ((int)lane == leader) nvme_advance_head(q);
            __syncwarp(mask);
            ns = 64;
        } else {
            __nanosleep(ns);
            if (ns < 2048) ns <<= 1;
        }
    }
    __threadfence();  // data written before the CQE is read after this point
    return status;
}

// Releases the lanes' slots for the next round (after any bounce data has been consumed).
__device__ inline void nvme_release_warp(const nvme_queue& q, unsigned long long ticket) {
    const unsigned int round = (unsigned int)(ticket >> q.depth_log2);
    __threadfence();
    nvme_st_gpu(nvme_turn(q, nvme_slot_of(q, ticket)), round + 1u);
}

// ---- data --------------------------------------------------------------------------------------

// Copies `bytes` (a multiple of 16) from a bounce slot in host memory to GPU memory, one
// thread. Loads fetch again from host memory (`ld.global.cv`): a reused slot never returns
// the previous command's data.
__device__ inline void nvme_copy_from_slot(void* dst, const void* slot, unsigned int bytes) {
    const uint4* s = (const uint4*)slot;
    uint4* d = (uint4*)dst;
    for (unsigned int i = 0; i < bytes / 16; i++) d[i] = __ldcv(s + i);
}



// ---- block API ---------------------------------------------------------------------------------

// Status field returned when a request does not fit the bounce slot (Invalid Field, SCT 0).
#define NVME_STATUS_FIELD_INVALID_FIELD 0x02u

// Whether `bytes` fit a bounce slot: up to two pages use the whole slot; longer transfers
// leave the slot's last page to their PRP list.
__device__ __forceinline__ bool nvme_fits_slot(const nvme_queue& q, unsigned int bytes) {
    return bytes <= 8192 ? bytes <= q.staging_slot_bytes : bytes + 4096 <= q.staging_slot_bytes;
}

__device__ __forceinline__ nvme_sqe nvme_rw_command(unsigned int opcode, unsigned int nsid, unsigned long long lba,
                                                     unsigned int blocks) {
    nvme_sqe cmd = {};
    cmd.cdw0 = opcode;
    cmd.nsid = nsid;
    cmd.cdw10 = (unsigned int)lba;
    cmd.cdw11 = (unsigned int)(lba >> 32);
    cmd.cdw12 = (blocks - 1u) & 0xffffu;
    return cmd;
}

// Reads `blocks` blocks at `lba` into GPU memory `dst` through the lane's bounce slot: the
// controller writes host memory and the lane pulls the data up. All lanes of `mask` call it
// together, each with its own request. Returns the status field (0 = success).
__device__ inline unsigned int nvme_read(const nvme_queue& q, void* dst, unsigned long long lba, unsigned int blocks,
                                         unsigned int mask) {
    const unsigned int bytes = blocks << q.lba_shift;
    const bool fits = blocks >= 1 && blocks <= 65536 && nvme_fits_slot(q, bytes);
    if (__all_sync(mask, fits) == 0) return NVME_STATUS_FIELD_INVALID_FIELD;
    const unsigned long long t = nvme_submit_warp(q, nvme_rw_command(NVME_OPC_READ, q.nsid, lba, blocks), mask,
                                                  NVME_DATA_BOUNCE);
    const unsigned int status = nvme_wait_warp(q, t, mask);
    if (status == 0) nvme_copy_from_slot(dst, nvme_slot(q, nvme_slot_of(q, t)), bytes);
    nvme_release_warp(q, t);
    return status;
}

// Writes `blocks` blocks at `lba` from GPU memory `src` through the lane's bounce slot.
__device__ inline unsigned int nvme_write(const nvme_queue& q, const void* src, unsigned long long lba,
                                          unsigned int blocks, unsigned int mask) {
    const unsigned int bytes = blocks << q.lba_shift;
    const bool fits = blocks >= 1 && blocks <= 65536 && nvme_fits_slot(q, bytes);
    if (__all_sync(mask, fits) == 0) return NVME_STATUS_FIELD_INVALID_FIELD;
    const unsigned long long t = nvme_submit_warp(q, nvme_rw_command(NVME_OPC_WRITE, q.nsid, lba, blocks), mask,
                                                  NVME_DATA_BOUNCE, src);
    const unsigned int status = nvme_wait_warp(q, t, mask);
    nvme_release_warp(q, t);
    return status;
}

// Reads straight into GPU memory: the PRPs name `dst` and the controller moves the data with
// the GPU's copy engines (the alternative to the bounce path; which is faster depends on size).
__device__ inline unsigned int nvme_read_direct(const nvme_queue& q, void* dst, unsigned long long lba,
                                                unsigned int blocks, unsigned int mask) {
    nvme_sqe cmd = nvme_rw_command(NVME_OPC_READ, q.nsid, lba, blocks);
    cmd.prp1 = (unsigned long long)dst;
    const unsigned long long t = nvme_submit_warp(q, cmd, mask, NVME_DATA_DIRECT);
    const unsigned int status = nvme_wait_warp(q, t, mask);
    nvme_release_warp(q, t);
    return status;
}

#endif  // GPU_NVME_NVME_CUH
