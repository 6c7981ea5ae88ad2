// nvme_spec.cuh: device-side mirror of crates/gpu-nvme/src/spec (NVMe Base 2.x §4.1 submission
// queue entry, §4.2 completion queue entry and status field; NVM Command Set 1.x §3 I/O
// commands). GPU threads build read/write commands here and decode completions polled from a CQ.
//
// Self-contained CUDA C++17 for NVRTC: no includes. Every struct matches its Rust twin
// (`SubmissionEntry`, `CompletionEntry`, `DsmRange`) field for field; the static_asserts below
// and the Rust unit tests in spec/mod.rs (which parse this file's `constexpr` and
// `static_assert` lines) keep the two in step. Little-endian, as on every CUDA platform.
#ifndef GPU_NVME_NVME_SPEC_CUH
#define GPU_NVME_NVME_SPEC_CUH

// offsetof for layout asserts. NVRTC's front end has neither __builtin_offsetof nor <cstddef>;
// its constant-expression equivalent is __INTADDR__. Other compilers get the builtin.
#ifndef NVME_OFFSETOF
#ifdef __CUDACC_RTC__
#define NVME_OFFSETOF(type, field) __INTADDR__(&((type*)0)->field)
#else
#define NVME_OFFSETOF(type, field) __builtin_offsetof(type, field)
#endif
#endif

// ---- sizes -------------------------------------------------------------------------------------
inline constexpr unsigned int NVME_SQE_SIZE = 64;
inline constexpr unsigned int NVME_CQE_SIZE = 16;
// NLB is a 16-bit 0-based block count.
inline constexpr unsigned int NVME_MAX_BLOCKS_PER_COMMAND = 65536;
// Byte offset of CQE dword 3 (CID in bits 0-15, phase + status in bits 16-31), for pollers
// that load it as one 32-bit word.
inline constexpr unsigned int NVME_CQE_DW3_OFFSET = 12;

// ---- admin opcodes -----------------------------------------------------------------------------
inline constexpr unsigned char NVME_ADMIN_OPC_DELETE_IO_SQ = 0x00;
inline constexpr unsigned char NVME_ADMIN_OPC_CREATE_IO_SQ = 0x01;
inline constexpr unsigned char NVME_ADMIN_OPC_GET_LOG_PAGE = 0x02;
inline constexpr unsigned char NVME_ADMIN_OPC_DELETE_IO_CQ = 0x04;
inline constexpr unsigned char NVME_ADMIN_OPC_CREATE_IO_CQ = 0x05;
inline constexpr unsigned char NVME_ADMIN_OPC_IDENTIFY = 0x06;
inline constexpr unsigned char NVME_ADMIN_OPC_ABORT = 0x08;
inline constexpr unsigned char NVME_ADMIN_OPC_SET_FEATURES = 0x09;
inline constexpr unsigned char NVME_ADMIN_OPC_GET_FEATURES = 0x0A;

// ---- NVM command set I/O opcodes (NVME_OPC_*) ---------------------------------------------------
inline constexpr unsigned char NVME_OPC_FLUSH = 0x00;
inline constexpr unsigned char NVME_OPC_WRITE = 0x01;
inline constexpr unsigned char NVME_OPC_READ = 0x02;
inline constexpr unsigned char NVME_OPC_WRITE_ZEROES = 0x08;
inline constexpr unsigned char NVME_OPC_DATASET_MANAGEMENT = 0x09;

// ---- status code types (SCT) -------------------------------------------------------------------
inline constexpr unsigned char NVME_SCT_GENERIC = 0x0;
inline constexpr unsigned char NVME_SCT_COMMAND_SPECIFIC = 0x1;
inline constexpr unsigned char NVME_SCT_MEDIA_AND_DATA_INTEGRITY = 0x2;
inline constexpr unsigned char NVME_SCT_PATH_RELATED = 0x3;
inline constexpr unsigned char NVME_SCT_VENDOR_SPECIFIC = 0x7;

// ---- generic status codes (SCT 0) --------------------------------------------------------------
inline constexpr unsigned char NVME_SC_SUCCESS = 0x00;
inline constexpr unsigned char NVME_SC_INVALID_OPCODE = 0x01;
inline constexpr unsigned char NVME_SC_INVALID_FIELD = 0x02;
inline constexpr unsigned char NVME_SC_COMMAND_ID_CONFLICT = 0x03;
inline constexpr unsigned char NVME_SC_DATA_TRANSFER_ERROR = 0x04;
inline constexpr unsigned char NVME_SC_ABORTED_POWER_LOSS = 0x05;
inline constexpr unsigned char NVME_SC_INTERNAL_ERROR = 0x06;
inline constexpr unsigned char NVME_SC_ABORT_REQUESTED = 0x07;
inline constexpr unsigned char NVME_SC_ABORTED_SQ_DELETION = 0x08;
inline constexpr unsigned char NVME_SC_INVALID_NAMESPACE = 0x0B;
inline constexpr unsigned char NVME_SC_PRP_OFFSET_INVALID = 0x13;
inline constexpr unsigned char NVME_SC_LBA_OUT_OF_RANGE = 0x80;
inline constexpr unsigned char NVME_SC_CAPACITY_EXCEEDED = 0x81;
inline constexpr unsigned char NVME_SC_NAMESPACE_NOT_READY = 0x82;

// ---- command specific status codes (SCT 1) -----------------------------------------------------
inline constexpr unsigned char NVME_SC_CS_COMPLETION_QUEUE_INVALID = 0x00;
inline constexpr unsigned char NVME_SC_CS_INVALID_QUEUE_IDENTIFIER = 0x01;
inline constexpr unsigned char NVME_SC_CS_INVALID_QUEUE_SIZE = 0x02;
inline constexpr unsigned char NVME_SC_CS_ABORT_COMMAND_LIMIT_EXCEEDED = 0x03;
inline constexpr unsigned char NVME_SC_CS_INVALID_INTERRUPT_VECTOR = 0x08;
inline constexpr unsigned char NVME_SC_CS_INVALID_LOG_PAGE = 0x09;
inline constexpr unsigned char NVME_SC_CS_INVALID_QUEUE_DELETION = 0x0C;

// ---- media and data integrity status codes (SCT 2) ---------------------------------------------
inline constexpr unsigned char NVME_SC_MEDIA_WRITE_FAULT = 0x80;
inline constexpr unsigned char NVME_SC_MEDIA_UNRECOVERED_READ_ERROR = 0x81;
inline constexpr unsigned char NVME_SC_MEDIA_COMPARE_FAILURE = 0x85;
inline constexpr unsigned char NVME_SC_MEDIA_ACCESS_DENIED = 0x86;
inline constexpr unsigned char NVME_SC_MEDIA_DEALLOCATED_OR_UNWRITTEN = 0x87;

// ---- submission queue entry (64 bytes) ---------------------------------------------------------
// cdw0: opcode bits 0-7, fused 8-9, PSDT 14-15 (0: PRPs), CID 16-31.
struct nvme_sqe {
    unsigned int cdw0;
    unsigned int nsid;
    unsigned int cdw2;
    unsigned int cdw3;
    unsigned long long mptr;
    unsigned long long prp1;
    unsigned long long prp2;
    unsigned int cdw10;
    unsigned int cdw11;
    unsigned int cdw12;
    unsigned int cdw13;
    unsigned int cdw14;
    unsigned int cdw15;
};
static_assert(sizeof(nvme_sqe) == 64, "nvme_sqe must be 64 bytes");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw0) == 0, "nvme_sqe.cdw0");
static_assert(NVME_OFFSETOF(nvme_sqe, nsid) == 4, "nvme_sqe.nsid");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw2) == 8, "nvme_sqe.cdw2");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw3) == 12, "nvme_sqe.cdw3");
static_assert(NVME_OFFSETOF(nvme_sqe, mptr) == 16, "nvme_sqe.mptr");
static_assert(NVME_OFFSETOF(nvme_sqe, prp1) == 24, "nvme_sqe.prp1");
static_assert(NVME_OFFSETOF(nvme_sqe, prp2) == 32, "nvme_sqe.prp2");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw10) == 40, "nvme_sqe.cdw10");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw11) == 44, "nvme_sqe.cdw11");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw12) == 48, "nvme_sqe.cdw12");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw13) == 52, "nvme_sqe.cdw13");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw14) == 56, "nvme_sqe.cdw14");
static_assert(NVME_OFFSETOF(nvme_sqe, cdw15) == 60, "nvme_sqe.cdw15");

// ---- completion queue entry (16 bytes) ---------------------------------------------------------
// status: phase tag bit 0; status field bits 1-15 (SC 1-8, SCT 9-11, CRD 12-13, More 14, DNR 15).
struct nvme_cqe {
    unsigned int dw0;
    unsigned int dw1;
    unsigned short sq_head;
    unsigned short sq_id;
    unsigned short cid;
    unsigned short status;
};
static_assert(sizeof(nvme_cqe) == 16, "nvme_cqe must be 16 bytes");
static_assert(NVME_OFFSETOF(nvme_cqe, dw0) == 0, "nvme_cqe.dw0");
static_assert(NVME_OFFSETOF(nvme_cqe, dw1) == 4, "nvme_cqe.dw1");
static_assert(NVME_OFFSETOF(nvme_cqe, sq_head) == 8, "nvme_cqe.sq_head");
static_assert(NVME_OFFSETOF(nvme_cqe, sq_id) == 10, "nvme_cqe.sq_id");
static_assert(NVME_OFFSETOF(nvme_cqe, cid) == 12, "nvme_cqe.cid");
static_assert(NVME_OFFSETOF(nvme_cqe, status) == 14, "nvme_cqe.status");

// ---- Dataset Management range (16 bytes); nlb is 1-based here ----------------------------------
struct nvme_dsm_range {
    unsigned int attributes;
    unsigned int nlb;
    unsigned long long slba;
};
static_assert(sizeof(nvme_dsm_range) == 16, "nvme_dsm_range must be 16 bytes");
static_assert(NVME_OFFSETOF(nvme_dsm_range, attributes) == 0, "nvme_dsm_range.attributes");
static_assert(NVME_OFFSETOF(nvme_dsm_range, nlb) == 4, "nvme_dsm_range.nlb");
static_assert(NVME_OFFSETOF(nvme_dsm_range, slba) == 8, "nvme_dsm_range.slba");

// ---- submission entry builders and accessors ---------------------------------------------------

// An entry with opcode, CID and NSID set, everything else zero (not fused, PRP data pointer).
__device__ __forceinline__ nvme_sqe nvme_sqe_header(unsigned char opcode, unsigned short cid,
                                                    unsigned int nsid) {
    nvme_sqe sqe = {};
    sqe.cdw0 = (unsigned int)opcode | ((unsigned int)cid << 16);
    sqe.nsid = nsid;
    return sqe;
}

// Read or Write of `blocks` blocks from `slba`. Precondition (the host-side Rust constructors
// check it, device code cannot report errors): 1 <= blocks <= NVME_MAX_BLOCKS_PER_COMMAND, nsid a
// valid namespace, prp1 dword aligned, prp2 as PRP rules require for the transfer length.
__device__ __forceinline__ nvme_sqe nvme_sqe_rw(unsigned char opcode, unsigned short cid,
                                                unsigned int nsid, unsigned long long slba,
                                                unsigned int blocks, unsigned long long prp1,
                                                unsigned long long prp2) {
    nvme_sqe sqe = nvme_sqe_header(opcode, cid, nsid);
    sqe.prp1 = prp1;
    sqe.prp2 = prp2;
    sqe.cdw10 = (unsigned int)(slba & 0xFFFFFFFFull);
    sqe.cdw11 = (unsigned int)(slba >> 32);
    sqe.cdw12 = (blocks - 1u) & 0xFFFFu;  // NLB is 0-based
    return sqe;
}

// Read `blocks` blocks from `slba` into the buffer at prp1/prp2 (see nvme_sqe_rw preconditions).
__device__ __forceinline__ nvme_sqe nvme_sqe_read(unsigned short cid, unsigned int nsid,
                                                  unsigned long long slba, unsigned int blocks,
                                                  unsigned long long prp1,
                                                  unsigned long long prp2) {
    return nvme_sqe_rw(NVME_OPC_READ, cid, nsid, slba, blocks, prp1, prp2);
}

// Write `blocks` blocks at `slba` from the buffer at prp1/prp2 (see nvme_sqe_rw preconditions).
__device__ __forceinline__ nvme_sqe nvme_sqe_write(unsigned short cid, unsigned int nsid,
                                                   unsigned long long slba, unsigned int blocks,
                                                   unsigned long long prp1,
                                                   unsigned long long prp2) {
    return nvme_sqe_rw(NVME_OPC_WRITE, cid, nsid, slba, blocks, prp1, prp2);
}

// Flush the volatile write cache of `nsid` (0xFFFFFFFF: all namespaces).
__device__ __forceinline__ nvme_sqe nvme_sqe_flush(unsigned short cid, unsigned int nsid) {
    return nvme_sqe_header(NVME_OPC_FLUSH, cid, nsid);
}

__device__ __forceinline__ unsigned char nvme_sqe_opcode(const nvme_sqe& sqe) {
    return (unsigned char)(sqe.cdw0 & 0xFFu);
}

__device__ __forceinline__ unsigned short nvme_sqe_cid(const nvme_sqe& sqe) {
    return (unsigned short)(sqe.cdw0 >> 16);
}

// Replaces the CID, keeping opcode and flags (a queue assigns CIDs at submission time).
__device__ __forceinline__ void nvme_sqe_set_cid(nvme_sqe& sqe, unsigned short cid) {
    sqe.cdw0 = (sqe.cdw0 & 0xFFFFu) | ((unsigned int)cid << 16);
}

// Starting LBA of Read/Write/Write Zeroes.
__device__ __forceinline__ unsigned long long nvme_sqe_slba(const nvme_sqe& sqe) {
    return (unsigned long long)sqe.cdw10 | ((unsigned long long)sqe.cdw11 << 32);
}

// Blocks moved by Read/Write/Write Zeroes: NLB + 1.
__device__ __forceinline__ unsigned int nvme_sqe_block_count(const nvme_sqe& sqe) {
    return (sqe.cdw12 & 0xFFFFu) + 1u;
}

// ---- completion decoding -----------------------------------------------------------------------

__device__ __forceinline__ bool nvme_cqe_phase(const nvme_cqe& cqe) {
    return (cqe.status & 1u) != 0;
}

// The 15-bit status field (phase tag removed).
__device__ __forceinline__ unsigned short nvme_cqe_status(const nvme_cqe& cqe) {
    return (unsigned short)(cqe.status >> 1);
}

__device__ __forceinline__ unsigned short nvme_cqe_cid(const nvme_cqe& cqe) {
    return cqe.cid;
}

// Dword 3 as one word: CID in bits 0-15, phase in bit 16, status field in bits 17-31.
__device__ __forceinline__ unsigned int nvme_cqe_dw3(const nvme_cqe& cqe) {
    return (unsigned int)cqe.cid | ((unsigned int)cqe.status << 16);
}

__device__ __forceinline__ bool nvme_dw3_phase(unsigned int dw3) {
    return ((dw3 >> 16) & 1u) != 0;
}

__device__ __forceinline__ unsigned short nvme_dw3_cid(unsigned int dw3) {
    return (unsigned short)(dw3 & 0xFFFFu);
}

__device__ __forceinline__ unsigned short nvme_dw3_status(unsigned int dw3) {
    return (unsigned short)(dw3 >> 17);
}

// ---- status field decoding (the 15-bit field, as returned by nvme_cqe_status) ------------------

__device__ __forceinline__ unsigned char nvme_status_sc(unsigned short field) {
    return (unsigned char)(field & 0xFFu);
}

__device__ __forceinline__ unsigned char nvme_status_sct(unsigned short field) {
    return (unsigned char)((field >> 8) & 0x7u);
}

__device__ __forceinline__ unsigned char nvme_status_crd(unsigned short field) {
    return (unsigned char)((field >> 11) & 0x3u);
}

__device__ __forceinline__ bool nvme_status_more(unsigned short field) {
    return ((field >> 13) & 1u) != 0;
}

__device__ __forceinline__ bool nvme_status_dnr(unsigned short field) {
    return ((field >> 14) & 1u) != 0;
}

// Success is generic type, code 0; CRD, More and DNR do not matter.
__device__ __forceinline__ bool nvme_status_is_success(unsigned short field) {
    return (field & 0x7FFu) == 0;
}

#endif  // GPU_NVME_NVME_SPEC_CUH
