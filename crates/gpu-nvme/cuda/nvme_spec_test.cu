// nvme_spec_test.cu: GPU self-test of nvme_spec.cuh. Each check compares what the device helpers
// produce with byte positions written out independently from the NVMe specification.
//
// Launch contract (every kernel):
//   grid: any number of blocks; block: any number of threads (e.g. <<<4, 128>>>).
//   argument: unsigned int* counts, two zeroed words in device (or mapped) memory;
//     counts[0] += passed checks, counts[1] += failed checks (atomicAdd).
//   Each thread runs a fixed number of checks on values derived from its global index:
//     nvme_spec_test_sqe:    NVME_SPEC_TEST_SQE_CHECKS    (14) per thread
//     nvme_spec_test_cqe:    NVME_SPEC_TEST_CQE_CHECKS    (10) per thread
//     nvme_spec_test_status: NVME_SPEC_TEST_STATUS_CHECKS  (2) per thread
//   Pass: counts[1] == 0 and counts[0] == threads * checks for the kernel launched.
#include "nvme_spec.cuh"

#define NVME_SPEC_TEST_SQE_CHECKS 14
#define NVME_SPEC_TEST_CQE_CHECKS 10
#define NVME_SPEC_TEST_STATUS_CHECKS 2

__device__ __forceinline__ void nvme_spec_check(unsigned int* counts, bool ok) {
    atomicAdd(&counts[ok ? 0 : 1], 1u);
}

// Whether `bytes[0..count]` hold the low `count` bytes of `value`, little-endian.
__device__ __forceinline__ bool nvme_spec_bytes_le(const unsigned char* bytes,
                                                   unsigned long long value, int count) {
    bool ok = true;
    for (int i = 0; i < count; ++i) {
        ok = ok && bytes[i] == (unsigned char)(value >> (8 * i));
    }
    return ok;
}

__device__ __forceinline__ bool nvme_spec_bytes_zero(const unsigned char* bytes, int from, int to) {
    bool ok = true;
    for (int i = from; i < to; ++i) {
        ok = ok && bytes[i] == 0;
    }
    return ok;
}

extern "C" __global__ void nvme_spec_test_sqe(unsigned int* counts) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned short cid = (unsigned short)(t * 7u + 1u);
    const unsigned int nsid = 1u + (t & 3u);
    const unsigned long long slba = 0x0123456789ABCDEFull + t;
    const unsigned int blocks = (t % NVME_MAX_BLOCKS_PER_COMMAND) + 1u;
    const unsigned long long prp1 = 0x100000000ull + 0x1000ull * t + 4u * (t & 7u);
    const unsigned long long prp2 = 0x200000000ull + 0x1000ull * t;

    nvme_sqe read = nvme_sqe_read(cid, nsid, slba, blocks, prp1, prp2);
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&read);
    nvme_spec_check(counts, b[0] == 0x02 && b[1] == 0);              // opcode Read, no fuse, PRPs
    nvme_spec_check(counts, nvme_spec_bytes_le(b + 2, cid, 2));       // CID bytes 2-3
    nvme_spec_check(counts, nvme_spec_bytes_le(b + 4, nsid, 4));      // NSID bytes 4-7
    nvme_spec_check(counts, nvme_spec_bytes_le(b + 24, prp1, 8));     // PRP1 bytes 24-31
    nvme_spec_check(counts, nvme_spec_bytes_le(b + 32, prp2, 8));     // PRP2 bytes 32-39
    nvme_spec_check(counts, nvme_spec_bytes_le(b + 40, slba, 8));     // SLBA bytes 40-47
    nvme_spec_check(counts, nvme_spec_bytes_le(b + 48, blocks - 1u, 2));  // NLB 0-based, 48-49
    nvme_spec_check(counts, nvme_spec_bytes_zero(b, 8, 24) && nvme_spec_bytes_zero(b, 50, 64));
    nvme_spec_check(counts, nvme_sqe_opcode(read) == NVME_OPC_READ && nvme_sqe_cid(read) == cid);
    nvme_spec_check(counts, nvme_sqe_slba(read) == slba && nvme_sqe_block_count(read) == blocks);

    nvme_sqe write = nvme_sqe_write(cid, nsid, slba, blocks, prp1, prp2);
    const unsigned char* w = reinterpret_cast<const unsigned char*>(&write);
    bool same_but_opcode = w[0] == 0x01;
    for (int i = 1; i < 64; ++i) {
        same_but_opcode = same_but_opcode && w[i] == b[i];
    }
    nvme_spec_check(counts, same_but_opcode);

    nvme_sqe flush = nvme_sqe_flush(cid, 0xFFFFFFFFu);
    const unsigned char* f = reinterpret_cast<const unsigned char*>(&flush);
    nvme_spec_check(counts, f[0] == NVME_OPC_FLUSH && nvme_spec_bytes_le(f + 4, 0xFFFFFFFFu, 4) &&
                                nvme_spec_bytes_zero(f, 8, 64));

    const unsigned short new_cid = (unsigned short)(cid ^ 0xA5A5u);
    nvme_sqe_set_cid(read, new_cid);
    nvme_spec_check(counts, nvme_spec_bytes_le(b + 2, new_cid, 2) && b[0] == 0x02 && b[1] == 0);
    nvme_spec_check(counts, sizeof(nvme_sqe) == NVME_SQE_SIZE && sizeof(nvme_cqe) == NVME_CQE_SIZE);
}

extern "C" __global__ void nvme_spec_test_cqe(unsigned int* counts) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned short cid = (unsigned short)(t * 13u + 5u);
    const unsigned short field = (unsigned short)((t * 2654435761u) >> 17);  // any 15-bit value
    const bool phase = (t & 1u) != 0;
    const unsigned short status_word = (unsigned short)((field << 1) | (phase ? 1u : 0u));

    // The CQE as a controller writes it: dw0, dw1, SQ head, SQ ID, CID, status, little-endian.
    unsigned char raw[16] = {};
    raw[0] = (unsigned char)t;
    raw[8] = 0x34;
    raw[10] = 0x02;
    raw[12] = (unsigned char)cid;
    raw[13] = (unsigned char)(cid >> 8);
    raw[14] = (unsigned char)status_word;
    raw[15] = (unsigned char)(status_word >> 8);
    nvme_cqe cqe;
    unsigned char* dst = reinterpret_cast<unsigned char*>(&cqe);
    for (int i = 0; i < 16; ++i) {
        dst[i] = raw[i];
    }

    nvme_spec_check(counts, nvme_cqe_phase(cqe) == phase);
    nvme_spec_check(counts, nvme_cqe_cid(cqe) == cid);
    nvme_spec_check(counts, nvme_cqe_status(cqe) == field);
    nvme_spec_check(counts, cqe.dw0 == (t & 0xFFu) && cqe.sq_head == 0x34 && cqe.sq_id == 2);
    const unsigned int dw3 = nvme_cqe_dw3(cqe);
    nvme_spec_check(counts, dw3 == ((unsigned int)raw[12] | ((unsigned int)raw[13] << 8) |
                                    ((unsigned int)raw[14] << 16) | ((unsigned int)raw[15] << 24)));
    nvme_spec_check(counts, nvme_dw3_phase(dw3) == phase && nvme_dw3_cid(dw3) == cid &&
                                nvme_dw3_status(dw3) == field);
    // Status bits in the 16-bit word: SC 1-8, SCT 9-11, CRD 12-13, More 14, DNR 15.
    const unsigned short s = nvme_cqe_status(cqe);
    nvme_spec_check(counts, nvme_status_sc(s) == ((status_word >> 1) & 0xFFu));
    nvme_spec_check(counts, nvme_status_sct(s) == ((status_word >> 9) & 0x7u) &&
                                nvme_status_crd(s) == ((status_word >> 12) & 0x3u));
    nvme_spec_check(counts, nvme_status_more(s) == (((status_word >> 14) & 1u) != 0) &&
                                nvme_status_dnr(s) == (((status_word >> 15) & 1u) != 0));
    nvme_spec_check(counts, nvme_status_is_success(s) ==
                                (nvme_status_sct(s) == NVME_SCT_GENERIC &&
                                 nvme_status_sc(s) == NVME_SC_SUCCESS));
}

extern "C" __global__ void nvme_spec_test_status(unsigned int* counts) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned short field = (unsigned short)(t & 0x7FFFu);
    // Reassembling the decoded parts gives the field back, for every 15-bit value.
    const unsigned int rebuilt = (unsigned int)nvme_status_sc(field) |
                                 ((unsigned int)nvme_status_sct(field) << 8) |
                                 ((unsigned int)nvme_status_crd(field) << 11) |
                                 ((nvme_status_more(field) ? 1u : 0u) << 13) |
                                 ((nvme_status_dnr(field) ? 1u : 0u) << 14);
    nvme_spec_check(counts, rebuilt == field);
    // LBA Out of Range with DNR, as the Rust Status::lba_out_of_range() encodes it (0x4080).
    const unsigned short lba = (unsigned short)(NVME_SC_LBA_OUT_OF_RANGE | (1u << 14));
    nvme_spec_check(counts, lba == 0x4080 && !nvme_status_is_success(lba) && nvme_status_dnr(lba));
}
