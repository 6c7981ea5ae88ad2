// GoFS's ring-buffer range lock, device side (GoFS paper §3.3, "Scalable accesses to inode").
//
// Twin of crates/common/src/range_lock.rs: same #[repr(C)] layouts, same constants, same
// protocol (read the Rust module doc for the protocol and why it is correct). A request draws a
// ticket, waits for its ring slot, publishes (offset, len), then waits only for OLDER requests
// that overlap it or have not published yet, so overlapping ranges are granted in ticket order
// and disjoint ranges in parallel.
//
// Entry points:
// - range_lock_acquire / range_lock_try_acquire: one thread (typically thread 0 of a block,
//   which then shares the grant with the block through __syncthreads).
// - range_lock_acquire_warp: all 32 lanes of a converged warp; lane 0 draws and publishes, then
//   every lane checks one older slot per step and __ballot_sync collects the conflicts.
// - range_lock_release: one thread, with the ticket an acquire returned.
// Ranges must have len > 0 and offset + len <= 2^64 - 1; acquires return
// RANGE_LOCK_INVALID_TICKET (and try returns false) otherwise.
//
// Memory ordering follows the PTX fence patterns: a volatile load followed by __threadfence()
// acts as an acquire, __threadfence() followed by a volatile store or atomic acts as a release.
// Waiting only ever targets older tickets, which belong to threads that are already running, so
// spinning blocks cannot starve the request they wait for of an SM.

#ifndef COMMON_RANGE_LOCK_CUH
#define COMMON_RANGE_LOCK_CUH

#define RANGE_LOCK_MAX_CAPACITY 1048576ULL
#define RANGE_LOCK_PHASE_BITS 2ULL
#define RANGE_LOCK_PHASE_MASK 3ULL
#define RANGE_LOCK_PHASE_VACANT 0ULL
#define RANGE_LOCK_PHASE_WAITING 1ULL
#define RANGE_LOCK_PHASE_HELD 2ULL
// Returned by the acquires for an invalid range; never a real ticket (tickets stay below 2^62).
#define RANGE_LOCK_INVALID_TICKET 0xFFFFFFFFFFFFFFFFULL
#define RANGE_LOCK_FULL_WARP 0xFFFFFFFFu
#define RANGE_LOCK_MIN_SLEEP_NS 32u
#define RANGE_LOCK_MAX_SLEEP_NS 2048u

// NVRTC's front end has no __builtin_offsetof (nor <cstddef>'s offsetof); __INTADDR__ is its
// constant-expression equivalent. Other compilers get the builtin.
#ifdef __CUDACC_RTC__
#define RANGE_LOCK_OFFSETOF(type, field) __INTADDR__(&((type*)0)->field)
#else
#define RANGE_LOCK_OFFSETOF(type, field) __builtin_offsetof(type, field)
#endif

// Counters of one lock. `tail` is the next ticket; every ticket below `head` is released.
// `head` sits on its own cache line, away from the ticket counter.
struct alignas(64) RangeLockHeader {
    unsigned long long capacity;
    unsigned long long tail;
    unsigned long long pad_to_head_line[6];
    unsigned long long head;
};
static_assert(sizeof(RangeLockHeader) == 128, "RangeLockHeader size differs from Rust");
static_assert(alignof(RangeLockHeader) == 64, "RangeLockHeader alignment differs from Rust");
static_assert(RANGE_LOCK_OFFSETOF(RangeLockHeader, capacity) == 0, "capacity offset");
static_assert(RANGE_LOCK_OFFSETOF(RangeLockHeader, tail) == 8, "tail offset");
static_assert(RANGE_LOCK_OFFSETOF(RangeLockHeader, head) == 64, "head offset");

// One request. `state` = ticket << RANGE_LOCK_PHASE_BITS | phase; the range is valid while the
// state names its ticket WAITING or HELD. Slot i serves tickets i, i + capacity, ...
struct alignas(32) RangeSlot {
    unsigned long long state;
    unsigned long long offset;
    unsigned long long len;
};
static_assert(sizeof(RangeSlot) == 32, "RangeSlot size differs from Rust");
static_assert(alignof(RangeSlot) == 32, "RangeSlot alignment differs from Rust");
static_assert(RANGE_LOCK_OFFSETOF(RangeSlot, state) == 0, "state offset");
static_assert(RANGE_LOCK_OFFSETOF(RangeSlot, offset) == 8, "offset offset");
static_assert(RANGE_LOCK_OFFSETOF(RangeSlot, len) == 16, "len offset");

// What a requester learns about an older ticket from its slot.
enum RangeLockOlder {
    RANGE_LOCK_OLDER_RELEASED,
    RANGE_LOCK_OLDER_UNPUBLISHED,
    RANGE_LOCK_OLDER_LIVE,
};

__device__ __forceinline__ unsigned long long range_lock_load(const unsigned long long* word) {
    return *(const volatile unsigned long long*)word;
}

__device__ __forceinline__ void range_lock_store(unsigned long long* word,
                                                 unsigned long long value) {
    *(volatile unsigned long long*)word = value;
}

__device__ __forceinline__ unsigned long long range_lock_slot_state(unsigned long long ticket,
                                                                    unsigned long long phase) {
    return (ticket << RANGE_LOCK_PHASE_BITS) | phase;
}

__device__ __forceinline__ unsigned long long range_lock_state_ticket(unsigned long long state) {
    return state >> RANGE_LOCK_PHASE_BITS;
}

__device__ __forceinline__ bool range_lock_valid_range(unsigned long long offset,
                                                       unsigned long long len) {
    return len != 0 && offset + len > offset;
}

__device__ __forceinline__ bool range_lock_overlaps(unsigned long long a_offset,
                                                    unsigned long long a_len,
                                                    unsigned long long b_offset,
                                                    unsigned long long b_len) {
    return a_offset < b_offset + b_len && b_offset < a_offset + a_len;
}

__device__ __forceinline__ void range_lock_backoff(unsigned int* sleep_ns) {
    __nanosleep(*sleep_ns);
    if (*sleep_ns < RANGE_LOCK_MAX_SLEEP_NS) *sleep_ns *= 2;
}

// Initial image, matching RangeLock::new: one thread writes the header, and slot i is written
// by anyone (e.g. a grid-stride loop) before any request is made.
__device__ __forceinline__ void range_lock_init_header(RangeLockHeader* header,
                                                       unsigned long long capacity) {
    header->capacity = capacity;
    header->tail = 0;
    for (int i = 0; i < 6; ++i) header->pad_to_head_line[i] = 0;
    header->head = 0;
}

__device__ __forceinline__ void range_lock_init_slot(RangeSlot* slots, unsigned long long index) {
    slots[index].state = range_lock_slot_state(index, RANGE_LOCK_PHASE_VACANT);
    slots[index].offset = 0;
    slots[index].len = 0;
}

__device__ __forceinline__ RangeSlot* range_lock_slot(const RangeLockHeader* header,
                                                      RangeSlot* slots,
                                                      unsigned long long ticket) {
    return &slots[ticket & (header->capacity - 1)];
}

// Waits until the slot of a freshly drawn ticket is vacant for it.
__device__ __forceinline__ void range_lock_wait_vacant(RangeSlot* slot,
                                                       unsigned long long ticket) {
    unsigned int sleep_ns = RANGE_LOCK_MIN_SLEEP_NS;
    while (range_lock_load(&slot->state) !=
           range_lock_slot_state(ticket, RANGE_LOCK_PHASE_VACANT)) {
        range_lock_backoff(&sleep_ns);
    }
}

__device__ __forceinline__ void range_lock_publish(RangeSlot* slot, unsigned long long ticket,
                                                   unsigned long long offset,
                                                   unsigned long long len) {
    // Acquire for the vacancy just seen, and ordering for readers of the previous ticket: one
    // that loads this new range must then see a newer state (see range_lock_inspect).
    __threadfence();
    range_lock_store(&slot->offset, offset);
    range_lock_store(&slot->len, len);
    __threadfence();
    range_lock_store(&slot->state, range_lock_slot_state(ticket, RANGE_LOCK_PHASE_WAITING));
}

__device__ __forceinline__ RangeLockOlder range_lock_inspect(const RangeSlot* slot,
                                                             unsigned long long ticket,
                                                             unsigned long long* offset,
                                                             unsigned long long* len) {
    unsigned long long state = range_lock_load(&slot->state);
    unsigned long long owner = range_lock_state_ticket(state);
    if (owner > ticket) return RANGE_LOCK_OLDER_RELEASED;
    if (owner < ticket || (state & RANGE_LOCK_PHASE_MASK) == RANGE_LOCK_PHASE_VACANT) {
        return RANGE_LOCK_OLDER_UNPUBLISHED;
    }
    __threadfence();
    *offset = range_lock_load(&slot->offset);
    *len = range_lock_load(&slot->len);
    __threadfence();
    // A newer ticket may have reused the slot while we read: then `ticket` was released.
    if (range_lock_state_ticket(range_lock_load(&slot->state)) != ticket) {
        return RANGE_LOCK_OLDER_RELEASED;
    }
    return RANGE_LOCK_OLDER_LIVE;
}

// Whether the older ticket `older` keeps a request for [offset, offset + len) waiting.
__device__ __forceinline__ bool range_lock_older_blocks(const RangeLockHeader* header,
                                                        RangeSlot* slots,
                                                        unsigned long long older,
                                                        unsigned long long offset,
                                                        unsigned long long len) {
    unsigned long long other_offset = 0, other_len = 0;
    switch (range_lock_inspect(range_lock_slot(header, slots, older), older, &other_offset,
                               &other_len)) {
        case RANGE_LOCK_OLDER_RELEASED: return false;
        case RANGE_LOCK_OLDER_UNPUBLISHED: return true;
        default: return range_lock_overlaps(offset, len, other_offset, other_len);
    }
}

// The first older ticket `ticket` must check; tickets below it are released or covered by a
// newer ticket of the same slot (see the Rust module doc).
__device__ __forceinline__ unsigned long long range_lock_scan_start(const RangeLockHeader* header,
                                                                    unsigned long long ticket) {
    unsigned long long span = header->capacity - 1;
    unsigned long long oldest_in_ring = ticket > span ? ticket - span : 0;
    unsigned long long head = range_lock_load(&header->head);
    return head > oldest_in_ring ? head : oldest_in_ring;
}

__device__ __forceinline__ void range_lock_grant(RangeSlot* slot, unsigned long long ticket) {
    // Acquire: the caller's critical section follows the releases it waited for.
    __threadfence();
    range_lock_store(&slot->state, range_lock_slot_state(ticket, RANGE_LOCK_PHASE_HELD));
}

// Releases `ticket` (from any acquire) and advances `head` over released tickets.
__device__ __forceinline__ void range_lock_release(RangeLockHeader* header, RangeSlot* slots,
                                                   unsigned long long ticket) {
    __threadfence();  // release: the critical section's writes come first
    atomicExch(&range_lock_slot(header, slots, ticket)->state,
               range_lock_slot_state(ticket + header->capacity, RANGE_LOCK_PHASE_VACANT));
    // Of two releasers of neighbouring tickets, at least one sees both releases.
    __threadfence();
    unsigned long long head = range_lock_load(&header->head);
    while (range_lock_state_ticket(range_lock_load(&range_lock_slot(header, slots, head)->state)) >
           head) {
        unsigned long long seen = atomicCAS(&header->head, head, head + 1);
        head = seen == head ? head + 1 : seen;
    }
}

// Blocking acquire by one thread; returns the ticket to pass to range_lock_release.
__device__ __forceinline__ unsigned long long range_lock_acquire(RangeLockHeader* header,
                                                                 RangeSlot* slots,
                                                                 unsigned long long offset,
                                                                 unsigned long long len) {
    if (!range_lock_valid_range(offset, len)) return RANGE_LOCK_INVALID_TICKET;
    unsigned long long ticket = atomicAdd(&header->tail, 1ULL);
    RangeSlot* slot = range_lock_slot(header, slots, ticket);
    range_lock_wait_vacant(slot, ticket);
    range_lock_publish(slot, ticket, offset, len);
    for (unsigned long long older = range_lock_scan_start(header, ticket); older < ticket;
         ++older) {
        unsigned int sleep_ns = RANGE_LOCK_MIN_SLEEP_NS;
        while (range_lock_older_blocks(header, slots, older, offset, len)) {
            range_lock_backoff(&sleep_ns);
        }
    }
    range_lock_grant(slot, ticket);
    return ticket;
}

// Non-blocking acquire by one thread: false when the ring has no vacant slot for the next
// ticket, an older request overlaps or has not published yet, or the range is invalid. A
// refused request releases its slot at once.
__device__ __forceinline__ bool range_lock_try_acquire(RangeLockHeader* header, RangeSlot* slots,
                                                       unsigned long long offset,
                                                       unsigned long long len,
                                                       unsigned long long* ticket_out) {
    if (!range_lock_valid_range(offset, len)) return false;
    // Draw a ticket only if its slot is vacant: a drawn ticket must be served.
    unsigned long long ticket = range_lock_load(&header->tail);
    for (;;) {
        unsigned long long state = range_lock_load(&range_lock_slot(header, slots, ticket)->state);
        if (state == range_lock_slot_state(ticket, RANGE_LOCK_PHASE_VACANT)) {
            unsigned long long seen = atomicCAS(&header->tail, ticket, ticket + 1);
            if (seen == ticket) break;
            ticket = seen;
        } else if (range_lock_state_ticket(state) < ticket) {
            return false;
        } else {
            ticket = range_lock_load(&header->tail);
        }
    }
    RangeSlot* slot = range_lock_slot(header, slots, ticket);
    range_lock_publish(slot, ticket, offset, len);
    for (unsigned long long older = range_lock_scan_start(header, ticket); older < ticket;
         ++older) {
        if (range_lock_older_blocks(header, slots, older, offset, len)) {
            range_lock_release(header, slots, ticket);
            return false;
        }
    }
    range_lock_grant(slot, ticket);
    *ticket_out = ticket;
    return true;
}

// Blocking acquire by a whole warp (all 32 lanes, converged; lane 0's range is used). Every
// lane returns the ticket; one lane later passes it to range_lock_release.
__device__ __forceinline__ unsigned long long range_lock_acquire_warp(RangeLockHeader* header,
                                                                      RangeSlot* slots,
                                                                      unsigned long long offset,
                                                                      unsigned long long len) {
    unsigned int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    offset = __shfl_sync(RANGE_LOCK_FULL_WARP, offset, 0);
    len = __shfl_sync(RANGE_LOCK_FULL_WARP, len, 0);
    if (!range_lock_valid_range(offset, len)) return RANGE_LOCK_INVALID_TICKET;
    unsigned long long ticket = 0, start = 0;
    if (lane == 0) {
        ticket = atomicAdd(&header->tail, 1ULL);
        RangeSlot* slot = range_lock_slot(header, slots, ticket);
        range_lock_wait_vacant(slot, ticket);
        range_lock_publish(slot, ticket, offset, len);
        start = range_lock_scan_start(header, ticket);
    }
    ticket = __shfl_sync(RANGE_LOCK_FULL_WARP, ticket, 0);
    start = __shfl_sync(RANGE_LOCK_FULL_WARP, start, 0);
    // 32 older tickets per step: lane i checks ticket base + i until none of them blocks.
    for (unsigned long long base = start; base < ticket; base += 32) {
        unsigned long long older = base + lane;
        bool blocked = older < ticket;
        unsigned int sleep_ns = RANGE_LOCK_MIN_SLEEP_NS;
        for (;;) {
            if (blocked) blocked = range_lock_older_blocks(header, slots, older, offset, len);
            if (__ballot_sync(RANGE_LOCK_FULL_WARP, blocked) == 0) break;
            range_lock_backoff(&sleep_ns);
        }
    }
    __threadfence();  // every lane's critical section follows the releases it observed
    if (lane == 0) range_lock_grant(range_lock_slot(header, slots, ticket), ticket);
    __syncwarp(RANGE_LOCK_FULL_WARP);
    return ticket;
}

#endif  // COMMON_RANGE_LOCK_CUH
