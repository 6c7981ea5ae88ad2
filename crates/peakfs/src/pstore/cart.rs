//! cART: PMeta's compact adaptive radix tree for dentries (PeakFS §III-C2, "Path-aware compact
//! dentry indexing", Fig. 7).
//!
//! A dentry key is `(pino, name)`. A hashtable maps `pino` to the root of one ART per directory,
//! and that ART indexes the names. The four space optimisations of the paper:
//!
//! - *Multiple-sized nodes*: Node16, Node64 and Node256. In Node16 and Node64 the key array has
//!   exactly as many entries as the node has slots, so a lookup compares all keys at once
//!   (SSE2 byte compares, sixteen keys per instruction, no branch) and masks by the count.
//!   Nodes grow when full and shrink when sparse.
//! - *Prefix compression*: a node carries the common prefix of the names below it.
//! - *Node consolidation*: the prefix lives in the unused tail of the node's value array,
//!   right-aligned, so dropping its front on a split only changes the prefix length and a
//!   merge writes the parent's bytes in front of it. A prefix too long for the free tail is
//!   moved into a parent node holding its front part. Node256 (no free tail) has no prefix.
//! - *Leaf compression*: a value is stored in its parent's value array; a value word is either
//!   a child reference (top bit set) or a dentry value. A name that ends at a node (a prefix
//!   of longer names) keeps its value in slot byte 0, which no name byte can take.
//!
//! Nodes live in chunked arenas addressed by `u32` indices, which keeps references small and
//! makes [`Cart::memory_bytes`] exact for the nodes.
//!
//! # Random lookups
//!
//! Structured names (§IV-F: a common prefix and dot-separated serial numbers) make a deep
//! tree: one level per digit, and for millions of names the lowest two or three levels miss
//! in cache on every random lookup, each miss waiting for the one before. A hash table pays
//! about as many misses, so a plain walk is no faster than a `HashMap`. Two things make cART's
//! random lookups faster:
//!
//! - *The jump table* goes straight to the node that holds the name's last byte (its *leaf
//!   holder*), skipping every level above it: one miss in the table, one in the node. It is
//!   keyed by the name's *stem* (all but the last three bytes, at most `STEM_MAX`) and the two
//!   bytes after the stem. Stems are interned once (`Stems`: the exact bytes, found through a
//!   small hash index that stays in cache) and shared by all the names that end below them, so
//!   an entry of the table proper (`Leaves`) is one word: stem id, two bytes, node. A lookup
//!   compares the whole stem and both bytes, so a hash collision costs a probe, never a wrong
//!   node. The table is exact because a node's *slot path* (the name bytes in front of its slot
//!   byte) never changes while it lives: a split above a node moves the front of its prefix
//!   into a new parent and a merge prepends its parent's bytes, but neither moves its slot
//!   byte. So an entry can only go stale when its node is retired (freed, or replaced by a node
//!   of another size); the insert or remove that retires it walked through it, so the retired
//!   node's entry is keyed by a prefix of that name, and `Cart::settle` fixes it right after.
//!   Inserts enter a leaf holder once it holds `JUMP_MIN_SLOTS` names (a node holding one or
//!   two names is not worth an entry), while the table takes at most a quarter of the nodes'
//!   bytes; any other name is looked up by walking from the root.
//! - *A lookup makes no branch on data that misses in cache* where it can be avoided (the
//!   key search is a masked SIMD compare, the table probe picks between two slots with a
//!   conditional move, the name is copied into a zero-padded buffer so a prefix check is one
//!   16-byte compare) and runs few instructions: consecutive independent lookups then overlap
//!   in the core, which is where a random lookup's time goes. The lines of a node are
//!   prefetched together as soon as its address is known.

use std::collections::HashMap;
use std::ops::ControlFlow;

use super::probe::{Growing, home};
use super::table::U64Map;

/// The largest dentry value (the top bit tags child references).
pub const MAX_VALUE: u64 = (1 << 63) - 1;
/// The longest name, in bytes.
pub const MAX_NAME: usize = 255;

const CHILD: u64 = 1 << 63;
const EMPTY: u64 = u64::MAX;

/// Errors of the dentry index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CartError {
    /// a name must be 1 to 255 bytes without '/' or NUL
    #[error("invalid dentry name {0:?}: need 1 to 255 bytes without '/' or NUL")]
    BadName(Vec<u8>),
    /// a dentry value must be at most 2^63 - 1
    #[error("dentry value {0:#x} exceeds 2^63 - 1")]
    BadValue(u64),
}

/// Checks that `name` is a valid dentry name.
pub fn check_name(name: &[u8]) -> Result<(), CartError> {
    if name.is_empty() || name.len() > MAX_NAME || name.iter().any(|&b| b == 0 || b == b'/') {
        return Err(CartError::BadName(name.to_vec()));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    N16,
    N64,
    N256,
}

/// A node reference: kind and arena index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ref {
    kind: Kind,
    idx: u32,
}

impl Ref {
    fn word(self) -> u64 {
        let k = match self.kind {
            Kind::N16 => 0,
            Kind::N64 => 1,
            Kind::N256 => 2,
        };
        CHILD | (k << 32) | u64::from(self.idx)
    }

    /// The child reference in a value word, or `None` for a leaf value.
    #[inline(always)]
    fn from_word(w: u64) -> Option<Ref> {
        if w & CHILD == 0 {
            return None;
        }
        let kind = match (w >> 32) & 3 {
            0 => Kind::N16,
            1 => Kind::N64,
            _ => Kind::N256,
        };
        Some(Ref {
            kind,
            idx: w as u32,
        })
    }
}

/// Node16 / Node64: `N` keys, `N` value words, the prefix right-aligned in the value tail.
/// Packed (alignment 1, 146 / 578 bytes): aligning to cache lines measured no faster on
/// random lookups and costs a third more memory.
#[derive(Debug, Clone)]
struct Small<const N: usize> {
    keys: [u8; N],
    count: u8,
    plen: u8,
    vals: [[u8; 8]; N],
}

impl<const N: usize> Small<N> {
    fn new() -> Self {
        Self {
            keys: [0; N],
            vals: [[0; 8]; N],
            count: 0,
            plen: 0,
        }
    }

    #[inline(always)]
    fn find(&self, b: u8) -> Option<usize> {
        // Branch-free: one flag bit per key, masked by the count. A branch on which key
        // matched would depend on a node that random lookups have just missed in cache; its
        // mispredictions flush the loads that the core has already started for the next lookup.
        let (blocks, _) = self.keys.as_chunks::<16>();
        let count = u32::from(self.count);
        let hits = if N == 16 {
            u64::from(eq_mask16(&blocks[0], b) & ((1u32 << count) - 1))
        } else {
            let mut hits = 0u64;
            for (c, k) in blocks.iter().enumerate() {
                hits |= u64::from(eq_mask16(k, b)) << (c * 16);
            }
            hits & u64::MAX.checked_shr(64 - count).unwrap_or(0)
        };
        (hits != 0).then(|| hits.trailing_zeros() as usize)
    }

    #[inline(always)]
    fn val(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.vals[i])
    }

    /// One lookup step at key position `pos`: checks the prefix, then finds the slot of the
    /// byte after it. Returns the slot's word and the position after the slot byte.
    #[inline(always)]
    fn step<const K: usize>(&self, key: &Key<'_, K>, pos: usize) -> Option<(u64, usize)> {
        let plen = usize::from(self.plen);
        let end = pos + plen;
        // Most levels have no prefix, and a tree's levels have the same pattern for most names:
        // the branch predicts well and skips the compare.
        if plen != 0 && (end > key.len || !key.ends_with_at(end, self.vals.as_flattened(), plen)) {
            return None;
        }
        let i = self.find(key.at(end))?;
        Some((self.val(i), end + 1))
    }

    fn prefix(&self) -> &[u8] {
        let flat = self.vals.as_flattened();
        &flat[flat.len() - usize::from(self.plen)..]
    }

    /// Bytes of value tail free for a prefix when the node holds `count` slots.
    fn room(count: usize) -> usize {
        (N - count) * 8
    }

    /// Replaces the prefix (the caller checked that it fits).
    fn set_prefix(&mut self, p: &[u8]) {
        let flat = self.vals.as_flattened_mut();
        let len = flat.len();
        flat[len - p.len()..].copy_from_slice(p);
        self.plen = p.len() as u8;
    }

    fn push(&mut self, b: u8, w: u64) {
        let n = usize::from(self.count);
        self.keys[n] = b;
        self.vals[n] = w.to_le_bytes();
        self.count += 1;
    }

    fn remove(&mut self, i: usize) {
        let last = usize::from(self.count) - 1;
        self.keys[i] = self.keys[last];
        self.vals[i] = self.vals[last];
        self.count -= 1;
    }

    fn slots(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        (0..usize::from(self.count)).map(|i| (self.keys[i], self.val(i)))
    }
}

/// Node256: the value array is indexed by the key byte; no prefix.
#[derive(Debug, Clone)]
struct Node256 {
    vals: [[u8; 8]; 256],
    count: u16,
}

impl Node256 {
    fn new() -> Self {
        Self {
            vals: [EMPTY.to_le_bytes(); 256],
            count: 0,
        }
    }

    fn val(&self, b: u8) -> Option<u64> {
        let w = u64::from_le_bytes(self.vals[usize::from(b)]);
        (w != EMPTY).then_some(w)
    }
}

/// A chunked arena with a free list: chunks of `C` nodes (a power of two) never move, so
/// memory grows by at most one chunk, and a node's address is one chunk load away from its
/// index (the index within a chunk needs no bounds check). Chunks of about 150 KB: chunks of
/// 2 MB (for transparent huge pages) measured slower on random lookups.
#[derive(Debug)]
struct Arena<T, const C: usize> {
    chunks: Vec<Box<[T; C]>>,
    /// Nodes handed out from the chunks (free or not).
    used: usize,
    free: Vec<u32>,
}

impl<T: Clone, const C: usize> Arena<T, C> {
    fn new() -> Self {
        Self {
            chunks: Vec::new(),
            used: 0,
            free: Vec::new(),
        }
    }

    fn alloc(&mut self, node: T) -> u32 {
        if let Some(i) = self.free.pop() {
            *self.get_mut(i) = node;
            return i;
        }
        if self.used == self.chunks.len() * C {
            let chunk: Box<[T]> = vec![node.clone(); C].into_boxed_slice();
            let Ok(chunk) = chunk.try_into() else {
                unreachable!("a chunk has C nodes")
            };
            self.chunks.push(chunk);
        }
        let i = self.used as u32;
        self.used += 1;
        *self.get_mut(i) = node;
        i
    }

    #[inline(always)]
    fn get(&self, i: u32) -> &T {
        let i = i as usize;
        &self.chunks[i / C][i % C]
    }

    fn get_mut(&mut self, i: u32) -> &mut T {
        let i = i as usize;
        &mut self.chunks[i / C][i % C]
    }

    fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    /// Nodes in use.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.used - self.free.len()
    }

    fn bytes(&self) -> usize {
        self.chunks.len() * C * size_of::<T>()
            + self.chunks.capacity() * size_of::<Box<[T; C]>>()
            + self.free.capacity() * 4
    }
}

/// Bit `i` set where `a[i] == b[i]`: one SSE2 byte compare and mask move.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn eq_mask(a: &[u8; 16], b: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8};
    // SAFETY: SSE2 is part of the x86_64 baseline; each unaligned load reads the 16 bytes of
    // an array reference.
    unsafe {
        let va = _mm_loadu_si128(a.as_ptr().cast());
        let vb = _mm_loadu_si128(b.as_ptr().cast());
        _mm_movemask_epi8(_mm_cmpeq_epi8(va, vb)) as u32
    }
}

/// Bit `i` set where `a[i] == b[i]`.
#[cfg(not(target_arch = "x86_64"))]
fn eq_mask(a: &[u8; 16], b: &[u8; 16]) -> u32 {
    (0..16).fold(0, |m, i| m | (u32::from(a[i] == b[i]) << i))
}

/// Bit `i` set where `keys[i] == b`: one SSE2 byte compare and mask move.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn eq_mask16(keys: &[u8; 16], b: u8) -> u32 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    // SAFETY: SSE2 is part of the x86_64 baseline; the unaligned load reads the 16 bytes of
    // an array reference.
    unsafe {
        let v = _mm_loadu_si128(keys.as_ptr().cast());
        _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8))) as u32
    }
}

/// Bit `i` set where `keys[i] == b`.
#[cfg(not(target_arch = "x86_64"))]
fn eq_mask16(keys: &[u8; 16], b: u8) -> u32 {
    keys.iter()
        .enumerate()
        .fold(0, |m, (i, &k)| m | (u32::from(k == b) << i))
}

/// A resolved node reference (lookups resolve each node once).
#[derive(Debug, Clone, Copy)]
enum NodeRef<'a> {
    N16(&'a Small<16>),
    N64(&'a Small<64>),
    N256(&'a Node256),
}

impl NodeRef<'_> {
    /// One lookup step (see [`Small::step`]).
    #[inline(always)]
    fn step<const K: usize>(self, key: &Key<'_, K>, pos: usize) -> Option<(u64, usize)> {
        match self {
            Self::N16(s) => s.step(key, pos),
            Self::N64(s) => s.step(key, pos),
            Self::N256(s) => Some((s.val(key.at(pos))?, pos + 1)),
        }
    }

    fn prefix_len(self) -> usize {
        match self {
            Self::N16(s) => usize::from(s.plen),
            Self::N64(s) => usize::from(s.plen),
            Self::N256(_) => 0,
        }
    }

    /// Random lookups are bound by cache misses, and within a node the header (count, prefix
    /// length), the prefix (value tail) and the matching value are each a dependent load on
    /// another line: load the node's lines at once so a level costs one miss, not three.
    /// `b`: the next key byte (the slot a Node256 will read).
    #[inline(always)]
    fn prefetch(self, b: u8) {
        match self {
            Self::N16(s) => prefetch_lines(s, [0, 64, 128, size_of::<Small<16>>() - 1]),
            // Header lines and the prefix tail; the value line is known only after the search.
            Self::N64(s) => prefetch_lines(s, [0, 64, size_of::<Small<64>>() - 1]),
            // No prefix: the slot of the next key byte is the only line needed.
            Self::N256(s) => prefetch_lines(s, [usize::from(b) * 8]),
        }
    }
}

/// Starts loading the cache lines of `node` at byte offsets `lines` (hints only).
fn prefetch_lines<T, const L: usize>(node: &T, lines: [usize; L]) {
    let base = std::ptr::from_ref(node).cast::<u8>();
    for off in lines {
        prefetch_line(base.wrapping_add(off));
    }
}

/// Asks the CPU to start loading the cache line holding `p` (a hint: no effect on results).
#[cfg(target_arch = "x86_64")]
fn prefetch_line(p: *const u8) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    // SAFETY: a prefetch is a hint to the hardware: it never faults and changes no memory the
    // program can observe, whatever the address; SSE is part of the x86_64 baseline.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
}

/// Without a prefetch instruction the hint is dropped.
#[cfg(not(target_arch = "x86_64"))]
fn prefetch_line(_p: *const u8) {}

/// Bytes in front of a [`Key`]'s name: a prefix compare reads the 16 bytes that end where
/// the prefix ends, whatever the position.
const KEY_PAD: usize = 16;

/// Names shorter than this are looked up in a small key buffer (less to clear).
const SHORT_NAME: usize = 48;

/// A looked-up name in a padded buffer of `N` bytes, so that each level reads its key bytes
/// without a branch: the byte at the name's length is 0 (slot byte 0: the name ends here),
/// and a prefix of up to 16 bytes is one masked 16-byte compare.
struct Key<'b, const N: usize> {
    buf: &'b [u8; N],
    len: usize,
}

impl<'b, const N: usize> Key<'b, N> {
    /// `name` copied into `buf`, which is zero (the caller checked `KEY_PAD + name.len() < N`).
    #[inline(always)]
    fn new(buf: &'b mut [u8; N], name: &[u8]) -> Self {
        let len = name.len();
        let dst = &mut buf[KEY_PAD..KEY_PAD + len];
        if len >= 16 {
            // 16-byte pieces, the last one ending at the name's end (overlapping): no call.
            for i in (0..len - 16).step_by(16) {
                dst[i..i + 16].copy_from_slice(&name[i..i + 16]);
            }
            dst[len - 16..].copy_from_slice(&name[len - 16..]);
        } else {
            dst.copy_from_slice(name);
        }
        Self { buf, len }
    }

    /// The 16 bytes that end at position `end` (`end <= 48`; zero in front of the name).
    #[inline(always)]
    fn window(&self, end: usize) -> [u8; 16] {
        self.buf[end..end + 16].try_into().unwrap_or([0; 16])
    }

    /// The byte at `pos` (0 at `len`); `pos <= len`.
    #[inline(always)]
    fn at(&self, pos: usize) -> u8 {
        self.buf[KEY_PAD + pos]
    }

    /// Whether the `plen` key bytes ending at `end` (`plen <= end <= len`) are the last
    /// `plen` bytes of `vals` (at least 16 bytes long).
    #[inline(always)]
    fn ends_with_at(&self, end: usize, vals: &[u8], plen: usize) -> bool {
        let t = vals.len();
        if plen <= 16 {
            // The 16 key bytes ending at `end` start at buffer index `end` (KEY_PAD in front).
            let (Ok(k), Ok(v)) = (
                self.buf[end..end + 16].try_into(),
                vals[t - 16..].try_into(),
            ) else {
                return false;
            };
            let differ = !eq_mask(k, v) & 0xffff;
            return differ >> (16 - plen) == 0;
        }
        self.buf[KEY_PAD + end - plen..KEY_PAD + end] == vals[t - plen..]
    }
}

/// The longest stem the jump table holds: a name of `len` bytes jumps through its stem, its
/// first `len - 3` bytes.
const STEM_MAX: usize = 48;

/// A node enters the jump table once it holds this many slots: a node holding fewer (such as
/// the chain below a name that shares little with others) is not worth an entry.
const JUMP_MIN_SLOTS: usize = 4;

/// Bits of a packed node index (a packed reference is the kind in two bits above it).
const PACK_IDX_BITS: u32 = 24;

/// Bits of a packed node reference.
const PACK_BITS: u32 = PACK_IDX_BITS + 2;

/// The jump-table key of the node whose slot byte is at position `d` of `path`: the stem
/// `path[..d - 2]` and the two bytes after it, if the table can hold them.
fn jump_key(path: &[u8], d: usize) -> Option<(&[u8], u16)> {
    if d < 3 || d - 2 > STEM_MAX || d > path.len() {
        return None;
    }
    Some((
        &path[..d - 2],
        u16::from_le_bytes([path[d - 2], path[d - 1]]),
    ))
}

/// A node reference in 26 bits, if its index fits.
fn pack(r: Ref) -> Option<u32> {
    let kind = match r.kind {
        Kind::N16 => 0,
        Kind::N64 => 1,
        Kind::N256 => 2,
    };
    (r.idx < 1 << PACK_IDX_BITS).then_some(kind << PACK_IDX_BITS | r.idx)
}

/// The hash of a stem: its directory, its length and its last 16 bytes (zero in front of a
/// shorter stem). Stems that differ only further forward share a hash and probe on; the
/// compare of the whole stem keeps lookups exact.
#[inline(always)]
fn stem_hash(pino: u64, len: usize, last16: [u8; 16]) -> u64 {
    let (lo, hi) = last16.split_at(8);
    let lo = u64::from_le_bytes(lo.try_into().unwrap_or([0; 8]));
    let hi = u64::from_le_bytes(hi.try_into().unwrap_or([0; 8]));
    let h = lo.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ hi.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ (pino ^ (len as u64) << 56).wrapping_mul(0x1656_67B1_9E37_79F9);
    (h ^ h >> 31).wrapping_mul(0xBF58_476D_1CE4_E5B9)
}

/// [`stem_hash`] of a stem held in a slice.
fn slice_hash(pino: u64, path: &[u8]) -> u64 {
    let mut last = [0; 16];
    let tail = &path[path.len().saturating_sub(16)..];
    last[16 - tail.len()..].copy_from_slice(tail);
    stem_hash(pino, path.len(), last)
}

/// Bit `i` set where the first 48 bytes of `a` and `b` agree.
#[inline(always)]
fn eq_mask48(a: &[u8; STEM_MAX], b: &[u8; STEM_MAX]) -> u64 {
    let (a, b) = (a.as_chunks::<16>().0, b.as_chunks::<16>().0);
    u64::from(eq_mask(&a[0], &b[0]))
        | u64::from(eq_mask(&a[1], &b[1])) << 16
        | u64::from(eq_mask(&a[2], &b[2])) << 32
}

/// One interned stem: a directory and up to [`STEM_MAX`] name bytes, and how many jump
/// entries name it. One cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Stem {
    /// The bytes, zero beyond `len`.
    path: [u8; STEM_MAX],
    pino: u64,
    refs: u32,
    len: u8,
}

/// Interned stems under stable ids (the jump table refers to them), found by their bytes
/// through an open-addressing index (linear probing, at most half full, growing without a
/// stop).
#[derive(Debug)]
struct Stems {
    arena: Vec<Stem>,
    free: Vec<u32>,
    /// Stem id + 1 per entry.
    index: Growing<u32>,
    live: usize,
    /// Live stems per length: a lookup skips a length no stem has.
    by_len: [u32; STEM_MAX + 1],
}

impl Stems {
    fn new() -> Self {
        Self {
            arena: Vec::new(),
            free: Vec::new(),
            index: Growing::new(),
            live: 0,
            by_len: [0; STEM_MAX + 1],
        }
    }

    /// The hash of stem `id` of `arena` (apart from `self` where the index is borrowed).
    fn hash_in(arena: &[Stem], id: u32) -> u64 {
        let s = &arena[id as usize];
        slice_hash(s.pino, &s.path[..usize::from(s.len)])
    }

    /// The stem of the key's first `len` bytes (`1 <= len <= STEM_MAX`).
    #[inline(always)]
    fn find_key<const N: usize>(&self, pino: u64, key: &Key<'_, N>, len: usize) -> Option<u32> {
        if self.by_len[len] == 0 {
            return None;
        }
        let (name, _) = key.buf[KEY_PAD..].split_first_chunk::<STEM_MAX>()?;
        let h = stem_hash(pino, len, key.window(len));
        let want = (1u64 << len) - 1;
        let v = self.index.find(h, |v| {
            let s = &self.arena[(v - 1) as usize];
            s.pino == pino && usize::from(s.len) == len && eq_mask48(&s.path, name) & want == want
        })?;
        Some(v - 1)
    }

    /// The stem `(pino, path)`, if interned.
    fn find(&self, pino: u64, path: &[u8]) -> Option<u32> {
        if path.is_empty() || path.len() > STEM_MAX || self.by_len[path.len()] == 0 {
            return None;
        }
        let v = self.index.find(slice_hash(pino, path), |v| {
            let s = &self.arena[(v - 1) as usize];
            s.pino == pino && &s.path[..usize::from(s.len)] == path
        })?;
        Some(v - 1)
    }

    /// The stem `(pino, path)`, interned if new (with no references yet); `None` if the
    /// stems are out of ids.
    fn intern(&mut self, pino: u64, path: &[u8]) -> Option<u32> {
        if let Some(id) = self.find(pino, path) {
            return Some(id);
        }
        let mut stem = Stem {
            path: [0; STEM_MAX],
            pino,
            refs: 0,
            len: path.len() as u8,
        };
        stem.path[..path.len()].copy_from_slice(path);
        let id = match self.free.pop() {
            Some(id) => {
                self.arena[id as usize] = stem;
                id
            }
            None if self.arena.len() + 1 < 1 << (64 - PACK_BITS - 16) => {
                self.arena.push(stem);
                (self.arena.len() - 1) as u32
            }
            None => return None,
        };
        let arena = &self.arena;
        // Not interned: `find` above looked.
        self.index.insert(slice_hash(pino, path), id + 1, |v| {
            Self::hash_in(arena, v - 1)
        });
        self.live += 1;
        self.by_len[path.len()] += 1;
        Some(id)
    }

    /// Drops one reference to stem `id`; the last one removes the stem.
    fn unref(&mut self, id: u32) {
        let s = &mut self.arena[id as usize];
        s.refs -= 1;
        if s.refs > 0 {
            return;
        }
        let h = Self::hash_in(&self.arena, id);
        self.live -= 1;
        self.by_len[usize::from(self.arena[id as usize].len)] -= 1;
        self.free.push(id);
        let arena = &self.arena;
        self.index
            .remove(h, |v| v == id + 1, |v| Self::hash_in(arena, v - 1));
    }

    fn bytes(&self) -> usize {
        self.arena.capacity() * size_of::<Stem>() + self.free.capacity() * 4 + self.index.bytes()
    }

    /// [`Self::bytes`] once the index has moved into its new table.
    fn settled_bytes(&self) -> usize {
        self.bytes() - self.index.bytes() + self.index.settled_bytes()
    }
}

/// The jump table's entries: `(stem, two tail bytes) -> node`, one word each (stem id + 1 in
/// the top 22 bits, the tail in the next 16, the packed node in the low 26), open addressing
/// with linear probing, at most half full, growing without a stop.
#[derive(Debug)]
struct Leaves {
    table: Growing<u64>,
}

/// The key bits of a jump entry for `(stem, tail)`.
#[inline(always)]
fn leaf_key(stem: u32, tail: u16) -> u64 {
    u64::from(stem + 1) << 16 | u64::from(tail)
}

#[inline(always)]
fn leaf_hash(key: u64) -> u64 {
    (key ^ key >> 29).wrapping_mul(0xBF58_476D_1CE4_E5B9)
}

/// The hash of a jump entry.
fn entry_hash(e: u64) -> u64 {
    leaf_hash(e >> PACK_BITS)
}

impl Leaves {
    fn new() -> Self {
        Self {
            table: Growing::new(),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.len()
    }

    /// The packed node of `(stem, tail)`.
    #[inline(always)]
    fn find(&self, stem: u32, tail: u16) -> Option<u32> {
        if self.table.len() == 0 {
            return None;
        }
        // The entry is almost always in its home slot of the new table or the next: pick
        // between the two without a branch on which (the slots come from memory that random
        // lookups miss, and a mispredicted branch there would discard the next lookup's work).
        let key = leaf_key(stem, tail);
        let h = leaf_hash(key);
        let (slots, shift) = self.table.table();
        let i = home(h, shift);
        let (e0, e1) = (slots[i], slots[(i + 1) & (slots.len() - 1)]);
        let e = if e0 >> PACK_BITS == key { e0 } else { e1 };
        if e >> PACK_BITS != key {
            let e = self.table.find(h, |e| e >> PACK_BITS == key)?;
            return Some(e as u32 & ((1 << PACK_BITS) - 1));
        }
        Some(e as u32 & ((1 << PACK_BITS) - 1))
    }

    /// Points `(stem, tail)` at `node`; true if the entry is new.
    fn set(&mut self, stem: u32, tail: u16, node: u32) -> bool {
        let key = leaf_key(stem, tail);
        self.table
            .put(
                leaf_hash(key),
                key << PACK_BITS | u64::from(node),
                |e| e >> PACK_BITS == key,
                entry_hash,
            )
            .is_none()
    }

    /// Removes the entry of `(stem, tail)`.
    fn remove(&mut self, stem: u32, tail: u16) {
        let key = leaf_key(stem, tail);
        self.table
            .remove(leaf_hash(key), |e| e >> PACK_BITS == key, entry_hash);
    }

    fn bytes(&self) -> usize {
        self.table.bytes()
    }
}

/// The dentry index of one worker: `(parent ino, name) -> value` (an ino or an inode offset).
#[derive(Debug)]
pub struct Cart {
    roots: U64Map<u64>,
    stems: Stems,
    leaves: Leaves,
    /// Nodes retired by the insert or remove in progress: `(old, new)`, packed.
    retired: Vec<(u32, Option<u32>)>,
    n16: Arena<Small<16>, 1024>,
    n64: Arena<Small<64>, 256>,
    n256: Arena<Node256, 64>,
    len: usize,
}

impl Default for Cart {
    fn default() -> Self {
        Self::new()
    }
}

/// Splits the rest of a key into the slot byte and what follows it (byte 0: the key ends here).
fn split(key: &[u8]) -> (u8, &[u8]) {
    match key.split_first() {
        Some((&b, rest)) => (b, rest),
        None => (0, key),
    }
}

fn common_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// How many of the names that start with a path sort after a name `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NamesAfter {
    /// None: the path sorts before it and is not its prefix.
    Zero,
    /// Some may: the path is a prefix of it (or equal).
    Part,
    /// All: the path sorts after it, or extends it.
    Every,
}

fn names_below(path: &[u8], after: &[u8]) -> NamesAfter {
    let n = path.len().min(after.len());
    match path[..n].cmp(&after[..n]) {
        std::cmp::Ordering::Less => NamesAfter::Zero,
        std::cmp::Ordering::Greater => NamesAfter::Every,
        std::cmp::Ordering::Equal if path.len() > after.len() => NamesAfter::Every,
        std::cmp::Ordering::Equal => NamesAfter::Part,
    }
}

/// Visits the slots of a Node16 or Node64 in byte order (they are kept unsorted), without
/// allocating.
fn for_sorted<const N: usize>(
    n: &Small<N>,
    mut f: impl FnMut(u8, u64) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let mut order = [(0u8, 0u8); N];
    let count = usize::from(n.count);
    for (i, o) in order[..count].iter_mut().enumerate() {
        *o = (n.keys[i], i as u8);
    }
    order[..count].sort_unstable();
    for &(b, i) in &order[..count] {
        f(b, n.val(usize::from(i)))?;
    }
    ControlFlow::Continue(())
}

impl Cart {
    /// An empty index.
    pub fn new() -> Self {
        Self {
            roots: HashMap::default(),
            stems: Stems::new(),
            leaves: Leaves::new(),
            retired: Vec::new(),
            n16: Arena::new(),
            n64: Arena::new(),
            n256: Arena::new(),
            len: 0,
        }
    }

    /// Number of dentries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the index holds no dentry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes held: node arenas (capacity), free lists and the root table.
    pub fn memory_bytes(&self) -> usize {
        // hashbrown: buckets = next power of two of capacity * 8 / 7, each a (u64, u64) plus a
        // control byte, and 16 trailing control bytes.
        let cap = self.roots.capacity();
        let buckets = if cap == 0 {
            0
        } else {
            (cap * 8 / 7).next_power_of_two()
        };
        self.n16.bytes()
            + self.n64.bytes()
            + self.n256.bytes()
            + self.stems.bytes()
            + self.leaves.bytes()
            + self.retired.capacity() * size_of::<(u32, Option<u32>)>()
            + buckets * 17
            + 16
    }

    /// Inserts or replaces the dentry; returns the previous value.
    pub fn insert(&mut self, pino: u64, name: &[u8], value: u64) -> Result<Option<u64>, CartError> {
        check_name(name)?;
        if value > MAX_VALUE {
            return Err(CartError::BadValue(value));
        }
        let old = match self.roots.get(&pino).copied() {
            None => {
                let r = self.single(name, value);
                self.roots.insert(pino, r.word());
                None
            }
            Some(w) => {
                let r = Ref::from_word(w).unwrap_or_else(|| unreachable!("roots hold nodes"));
                let (nr, old) = self.insert_at(r, name, value);
                if nr != r {
                    self.roots.insert(pino, nr.word());
                }
                old
            }
        };
        if old.is_none() {
            self.len += 1;
        }
        self.settle(pino, name);
        self.index_leaf(pino, name);
        Ok(old)
    }

    /// Enters the node that holds `name`'s last byte (slot position `len - 1`) in the jump
    /// table under the name's stem and the two bytes after it.
    fn index_leaf(&mut self, pino: u64, name: &[u8]) {
        let Some((stem, tail)) = name.len().checked_sub(1).and_then(|d| jump_key(name, d)) else {
            return;
        };
        let Some(r) = self.node_at(pino, name, name.len() - 1) else {
            return;
        };
        let Some(node) = pack(r) else { return };
        if self.count(r) < JUMP_MIN_SLOTS {
            return;
        }
        // An entry already there follows the node, whatever the budget.
        if let Some(id) = self.stems.find(pino, stem)
            && self.leaves.find(id, tail).is_some()
        {
            self.leaves.set(id, tail, node);
            return;
        }
        // New entries only while the table takes at most a quarter of the nodes' bytes.
        // (Counted as the tables will be once moved: a table doubles, then moves.)
        let nodes = self.n16.bytes() + self.n64.bytes() + self.n256.bytes();
        if 4 * (self.leaves.table.settled_bytes() + self.stems.settled_bytes()) > nodes {
            return;
        }
        let Some(id) = self.stems.intern(pino, stem) else {
            return;
        };
        if self.leaves.set(id, tail, node) {
            self.stems.arena[id as usize].refs += 1;
        }
    }

    /// After an insert or remove of `name`: fixes the jump entries of retired nodes.
    fn settle(&mut self, pino: u64, name: &[u8]) {
        if self.retired.is_empty() {
            return;
        }
        // Each retired node lay on `name`'s path: its entry, if any, is keyed by the stem
        // and tail of its slot position `d`.
        for d in 3..=name.len().min(STEM_MAX + 2) {
            let Some((stem, tail)) = jump_key(name, d) else {
                continue;
            };
            let Some(id) = self.stems.find(pino, stem) else {
                continue;
            };
            let Some(node) = self.leaves.find(id, tail) else {
                continue;
            };
            let mut now = Some(node);
            for &(old, new) in &self.retired {
                if now == Some(old) {
                    now = new;
                }
            }
            if now == Some(node) {
                continue;
            }
            match now {
                Some(n) => {
                    self.leaves.set(id, tail, n);
                }
                None => {
                    self.leaves.remove(id, tail);
                    self.stems.unref(id);
                }
            }
        }
        self.retired.clear();
    }

    /// The node on `name`'s path whose slot byte is at position `d`, if there is one.
    fn node_at(&self, pino: u64, name: &[u8], d: usize) -> Option<Ref> {
        let mut r = Ref::from_word(*self.roots.get(&pino)?)?;
        let mut pos = 0;
        loop {
            let slot = pos + self.prefix(r).len();
            if slot >= d {
                return (slot == d).then_some(r);
            }
            r = Ref::from_word(self.find(r, *name.get(slot)?)?)?;
            pos = slot + 1;
        }
    }

    /// The value of a dentry.
    pub fn get(&self, pino: u64, name: &[u8]) -> Option<u64> {
        if name.len() < SHORT_NAME {
            let mut buf = [0; KEY_PAD + SHORT_NAME];
            let key = Key::new(&mut buf, name);
            let Some(n) = self.jump(pino, &key) else {
                return self.lookup_from_root(pino, &key);
            };
            // The node's prefix ends at its slot byte, the name's last; the value is almost
            // always in that slot (else in slot 0 of a child, for a name that others extend).
            let (w, next) = n.step(&key, (key.len - 1).checked_sub(n.prefix_len())?)?;
            if w & CHILD == 0 {
                return (next >= key.len).then_some(w);
            }
            return self.lookup(self.child(w), &key, next);
        }
        if name.len() > MAX_NAME {
            return None;
        }
        let mut buf = [0; KEY_PAD + MAX_NAME + 1];
        self.lookup_from_root(pino, &Key::new(&mut buf, name))
    }

    #[inline(never)]
    fn lookup_from_root<const K: usize>(&self, pino: u64, key: &Key<'_, K>) -> Option<u64> {
        let root = Ref::from_word(*self.roots.get(&pino)?)?;
        self.lookup(self.node(root), key, 0)
    }

    /// The node holding the key's last byte, from the jump table.
    #[inline(always)]
    fn jump<const K: usize>(&self, pino: u64, key: &Key<'_, K>) -> Option<NodeRef<'_>> {
        let len = key.len;
        if !(4..=STEM_MAX + 3).contains(&len) {
            return None;
        }
        let stem = self.stems.find_key(pino, key, len - 3)?;
        let tail = u16::from_le_bytes([key.at(len - 3), key.at(len - 2)]);
        let n = self.packed(self.leaves.find(stem, tail)?);
        // The value sits on another line of the node than its keys: load them together.
        n.prefetch(key.at(len - 1));
        Some(n)
    }

    /// Walks down from `n`, whose prefix starts at key position `pos`.
    #[inline(never)]
    fn lookup<'a, const K: usize>(
        &'a self,
        mut n: NodeRef<'a>,
        key: &Key<'_, K>,
        mut pos: usize,
    ) -> Option<u64> {
        loop {
            // One arena access per level: prefix, search and value come from the same node.
            let (w, next) = n.step(key, pos)?;
            if w & CHILD == 0 {
                return (next >= key.len).then_some(w);
            }
            // Slot byte 0 (the key's end) never holds a child.
            if next > key.len {
                return None;
            }
            pos = next;
            n = self.child(w);
            n.prefetch(key.at(pos));
        }
    }

    /// Removes a dentry; returns its value.
    pub fn remove(&mut self, pino: u64, name: &[u8]) -> Option<u64> {
        if name.is_empty() || name.contains(&0) {
            return None;
        }
        let r = Ref::from_word(*self.roots.get(&pino)?)?;
        let (nr, old) = self.remove_at(r, name);
        self.settle(pino, name);
        let old = old?;
        match nr {
            None => {
                self.roots.remove(&pino);
            }
            Some(n) if n != r => {
                self.roots.insert(pino, n.word());
            }
            Some(_) => {}
        }
        self.len -= 1;
        Some(old)
    }

    /// Whether directory `pino` has any dentry here.
    pub fn has_dir(&self, pino: u64) -> bool {
        self.roots.contains_key(&pino)
    }

    /// The directories with dentries here, in no particular order.
    pub fn dirs(&self) -> Vec<u64> {
        self.roots.keys().copied().collect()
    }

    /// Visits the dentries of `pino` in name order, starting after `after` if given, until `f`
    /// breaks. The walk goes down only where names after `after` are: resuming after a name
    /// costs a path down the tree, not the names before it. So a caller may walk a directory
    /// a piece at a time (a readdir, a checkpoint written between requests) while the
    /// directory changes between pieces: each name that stays is visited exactly once.
    pub fn for_each_in_dir(
        &self,
        pino: u64,
        after: Option<&[u8]>,
        mut f: impl FnMut(&[u8], u64) -> ControlFlow<()>,
    ) {
        let Some(r) = self.roots.get(&pino).and_then(|&w| Ref::from_word(w)) else {
            return;
        };
        let mut path = Vec::with_capacity(MAX_NAME);
        let _ = self.walk(r, &mut path, after, &mut f);
    }

    /// All dentries of `pino` in name order (readdir).
    pub fn iter_dir(&self, pino: u64) -> Vec<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        self.for_each_in_dir(pino, None, |n, v| {
            out.push((n.to_vec(), v));
            ControlFlow::Continue(())
        });
        out
    }

    /// Visits the names under `r` (whose names start with `path`) that sort after `after`, in
    /// order.
    fn walk(
        &self,
        r: Ref,
        path: &mut Vec<u8>,
        after: Option<&[u8]>,
        f: &mut impl FnMut(&[u8], u64) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let base = path.len();
        path.extend_from_slice(self.prefix(r));
        let after = match after.map(|a| (a, names_below(path, a))) {
            Some((_, NamesAfter::Zero)) => {
                path.truncate(base);
                return ControlFlow::Continue(());
            }
            Some((a, NamesAfter::Part)) => Some(a),
            Some((_, NamesAfter::Every)) | None => None,
        };
        let mut visit = |b: u8, w: u64, path: &mut Vec<u8>| {
            let len = path.len();
            if b != 0 {
                path.push(b);
            }
            let flow = match Ref::from_word(w) {
                Some(c) => self.walk(c, path, after, f),
                None if after.is_none_or(|a| path.as_slice() > a) => f(path, w),
                None => ControlFlow::Continue(()),
            };
            path.truncate(len);
            flow
        };
        match r.kind {
            Kind::N16 => for_sorted(self.n16.get(r.idx), |b, w| visit(b, w, path))?,
            Kind::N64 => for_sorted(self.n64.get(r.idx), |b, w| visit(b, w, path))?,
            Kind::N256 => {
                let n = self.n256.get(r.idx);
                for b in 0..=255u8 {
                    if let Some(w) = n.val(b) {
                        visit(b, w, path)?;
                    }
                }
            }
        }
        path.truncate(base);
        ControlFlow::Continue(())
    }

    // ---- node primitives ----

    /// The node of a packed reference.
    #[inline(always)]
    fn packed(&self, p: u32) -> NodeRef<'_> {
        let idx = p & ((1 << PACK_IDX_BITS) - 1);
        match p >> PACK_IDX_BITS & 3 {
            0 => NodeRef::N16(self.n16.get(idx)),
            1 => NodeRef::N64(self.n64.get(idx)),
            _ => NodeRef::N256(self.n256.get(idx)),
        }
    }

    /// The node of a child word (top bit set).
    #[inline(always)]
    fn child(&self, w: u64) -> NodeRef<'_> {
        let idx = w as u32;
        match (w >> 32) & 3 {
            0 => NodeRef::N16(self.n16.get(idx)),
            1 => NodeRef::N64(self.n64.get(idx)),
            _ => NodeRef::N256(self.n256.get(idx)),
        }
    }

    #[inline(always)]
    fn node(&self, r: Ref) -> NodeRef<'_> {
        match r.kind {
            Kind::N16 => NodeRef::N16(self.n16.get(r.idx)),
            Kind::N64 => NodeRef::N64(self.n64.get(r.idx)),
            Kind::N256 => NodeRef::N256(self.n256.get(r.idx)),
        }
    }

    fn prefix(&self, r: Ref) -> &[u8] {
        match r.kind {
            Kind::N16 => self.n16.get(r.idx).prefix(),
            Kind::N64 => self.n64.get(r.idx).prefix(),
            Kind::N256 => &[],
        }
    }

    fn count(&self, r: Ref) -> usize {
        match r.kind {
            Kind::N16 => usize::from(self.n16.get(r.idx).count),
            Kind::N64 => usize::from(self.n64.get(r.idx).count),
            Kind::N256 => usize::from(self.n256.get(r.idx).count),
        }
    }

    fn find(&self, r: Ref, b: u8) -> Option<u64> {
        match r.kind {
            Kind::N16 => {
                let n = self.n16.get(r.idx);
                n.find(b).map(|i| n.val(i))
            }
            Kind::N64 => {
                let n = self.n64.get(r.idx);
                n.find(b).map(|i| n.val(i))
            }
            Kind::N256 => self.n256.get(r.idx).val(b),
        }
    }

    fn slots(&self, r: Ref) -> Vec<(u8, u64)> {
        match r.kind {
            Kind::N16 => self.n16.get(r.idx).slots().collect(),
            Kind::N64 => self.n64.get(r.idx).slots().collect(),
            Kind::N256 => {
                let n = self.n256.get(r.idx);
                (0..=255u8)
                    .filter_map(|b| n.val(b).map(|w| (b, w)))
                    .collect()
            }
        }
    }

    /// Overwrites an existing slot.
    fn set(&mut self, r: Ref, b: u8, w: u64) {
        match r.kind {
            Kind::N16 => {
                let n = self.n16.get_mut(r.idx);
                if let Some(i) = n.find(b) {
                    n.vals[i] = w.to_le_bytes();
                }
            }
            Kind::N64 => {
                let n = self.n64.get_mut(r.idx);
                if let Some(i) = n.find(b) {
                    n.vals[i] = w.to_le_bytes();
                }
            }
            Kind::N256 => self.n256.get_mut(r.idx).vals[usize::from(b)] = w.to_le_bytes(),
        }
    }

    /// Drops the first `k` bytes of a node's prefix: only its length changes.
    fn drop_prefix_front(&mut self, r: Ref, k: usize) {
        match r.kind {
            Kind::N16 => self.n16.get_mut(r.idx).plen -= k as u8,
            Kind::N64 => self.n64.get_mut(r.idx).plen -= k as u8,
            Kind::N256 => debug_assert_eq!(k, 0),
        }
    }

    /// Frees `r`, or replaces it by `new` (same names below it, another node size), and
    /// records that for the jump cache.
    fn retire(&mut self, r: Ref, new: Option<Ref>) {
        if let Some(old) = pack(r) {
            self.retired.push((old, new.and_then(pack)));
        }
        match r.kind {
            Kind::N16 => self.n16.release(r.idx),
            Kind::N64 => self.n64.release(r.idx),
            Kind::N256 => self.n256.release(r.idx),
        }
    }

    /// A fresh Node16 with `prefix` (which must fit) and one slot.
    fn new16(&mut self, prefix: &[u8], b: u8, w: u64) -> Ref {
        let mut n = Small::<16>::new();
        n.push(b, w);
        n.set_prefix(prefix);
        Ref {
            kind: Kind::N16,
            idx: self.n16.alloc(n),
        }
    }

    /// Puts `r` under parents that hold the front of `prefix` until each prefix fits; `r` keeps
    /// the last `keep` bytes. Returns the topmost node.
    fn chain_above(&mut self, r: Ref, prefix: &[u8], keep: usize) -> Ref {
        let cut = prefix.len() - keep;
        if cut == 0 {
            return r;
        }
        let front = &prefix[..cut - 1];
        let room = Small::<16>::room(1);
        let fits = front.len().min(room);
        let top_keep = &front[front.len() - fits..];
        let m = self.new16(top_keep, prefix[cut - 1], r.word());
        self.chain_above(m, front, fits)
    }

    /// A node tree holding exactly one name: leaf compression puts the value in the slot of
    /// the name's last byte (or slot 0 for the empty rest).
    fn single(&mut self, key: &[u8], value: u64) -> Ref {
        let (b, p) = match key.split_last() {
            Some((&b, p)) => (b, p),
            None => (0, key),
        };
        let room = Small::<16>::room(1);
        let keep = p.len().min(room);
        let r = self.new16(&p[p.len() - keep..], b, value);
        self.chain_above(r, p, keep)
    }

    /// The word to store in a slot for the key rest after the slot byte.
    fn slot_word(&mut self, rest: &[u8], value: u64) -> u64 {
        if rest.is_empty() {
            value
        } else {
            self.single(rest, value).word()
        }
    }

    /// Adds a new slot; may grow the node or move part of its prefix into a new parent.
    /// Returns the node that replaces `r` in its parent.
    fn add(&mut self, r: Ref, b: u8, w: u64) -> Ref {
        match r.kind {
            Kind::N16 => {
                let n = self.n16.get(r.idx);
                let count = usize::from(n.count);
                if count == 16 {
                    let grown = self.grow16(r);
                    return self.add(grown, b, w);
                }
                let room = Small::<16>::room(count + 1);
                if usize::from(n.plen) > room {
                    let p = n.prefix().to_vec();
                    self.drop_prefix_front(r, p.len() - room);
                    self.n16.get_mut(r.idx).push(b, w);
                    return self.chain_above(r, &p, room);
                }
                self.n16.get_mut(r.idx).push(b, w);
                r
            }
            Kind::N64 => {
                let n = self.n64.get(r.idx);
                let count = usize::from(n.count);
                if count == 64 {
                    let grown = self.grow64(r);
                    return self.add(grown, b, w);
                }
                let room = Small::<64>::room(count + 1);
                if usize::from(n.plen) > room {
                    let p = n.prefix().to_vec();
                    self.drop_prefix_front(r, p.len() - room);
                    self.n64.get_mut(r.idx).push(b, w);
                    return self.chain_above(r, &p, room);
                }
                self.n64.get_mut(r.idx).push(b, w);
                r
            }
            Kind::N256 => {
                let n = self.n256.get_mut(r.idx);
                n.vals[usize::from(b)] = w.to_le_bytes();
                n.count += 1;
                r
            }
        }
    }

    fn grow16(&mut self, r: Ref) -> Ref {
        let old = self.n16.get(r.idx).clone();
        let mut n = Small::<64>::new();
        n.keys[..16].copy_from_slice(&old.keys);
        n.vals[..16].copy_from_slice(&old.vals);
        n.count = old.count;
        n.set_prefix(old.prefix());
        let nr = Ref {
            kind: Kind::N64,
            idx: self.n64.alloc(n),
        };
        self.retire(r, Some(nr));
        nr
    }

    /// Node64 to Node256; the prefix moves to a parent chain (Node256 has none).
    fn grow64(&mut self, r: Ref) -> Ref {
        let old = self.n64.get(r.idx).clone();
        let mut n = Node256::new();
        for (b, w) in old.slots() {
            n.vals[usize::from(b)] = w.to_le_bytes();
        }
        n.count = u16::from(old.count);
        let nr = Ref {
            kind: Kind::N256,
            idx: self.n256.alloc(n),
        };
        // The slot path stays: the prefix moves into the chain above.
        self.retire(r, Some(nr));
        self.chain_above(nr, old.prefix(), 0)
    }

    fn insert_at(&mut self, r: Ref, key: &[u8], value: u64) -> (Ref, Option<u64>) {
        let p = self.prefix(r);
        let k = common_len(p, key);
        if k < p.len() {
            // Split: a new node takes the common part; `r` keeps what follows its slot byte.
            let p = p.to_vec();
            self.drop_prefix_front(r, k + 1);
            let (b, rest) = split(&key[k..]);
            let w = self.slot_word(rest, value);
            let mut s = Small::<16>::new();
            s.push(p[k], r.word());
            s.push(b, w);
            let room = Small::<16>::room(2);
            let keep = k.min(room);
            s.set_prefix(&p[k - keep..k]);
            let sr = Ref {
                kind: Kind::N16,
                idx: self.n16.alloc(s),
            };
            return (self.chain_above(sr, &p[..k], keep), None);
        }
        let (b, rest) = split(&key[k..]);
        match self.find(r, b) {
            None => {
                let w = self.slot_word(rest, value);
                (self.add(r, b, w), None)
            }
            Some(w) => match Ref::from_word(w) {
                Some(c) => {
                    let (nc, old) = self.insert_at(c, rest, value);
                    if nc != c {
                        self.set(r, b, nc.word());
                    }
                    (r, old)
                }
                None if rest.is_empty() => {
                    self.set(r, b, value);
                    (r, Some(w))
                }
                None => {
                    // The leaf's name ends at this byte; the longer name needs a node below,
                    // where the old value moves to slot 0.
                    let c = self.new16(&[], 0, w);
                    let (nc, _) = self.insert_at(c, rest, value);
                    self.set(r, b, nc.word());
                    (r, None)
                }
            },
        }
    }

    /// Returns the node replacing `r` (`None`: it became empty) and the removed value.
    fn remove_at(&mut self, r: Ref, key: &[u8]) -> (Option<Ref>, Option<u64>) {
        let Some(key) = key.strip_prefix(self.prefix(r)) else {
            return (Some(r), None);
        };
        let (b, rest) = split(key);
        let Some(w) = self.find(r, b) else {
            return (Some(r), None);
        };
        match Ref::from_word(w) {
            None if rest.is_empty() => (self.delete_slot(r, b), Some(w)),
            None => (Some(r), None),
            Some(c) => {
                let (nc, old) = self.remove_at(c, rest);
                if old.is_none() {
                    return (Some(r), None);
                }
                match nc {
                    None => (self.delete_slot(r, b), old),
                    Some(n) => {
                        if n != c {
                            self.set(r, b, n.word());
                        }
                        // A chain parent above a shrunken node may now fit into it.
                        if self.count(r) == 1 {
                            return (Some(self.merge_single(r)), old);
                        }
                        (Some(r), old)
                    }
                }
            }
        }
    }

    /// Removes slot `b`, then shrinks the node or merges it into its only child.
    fn delete_slot(&mut self, r: Ref, b: u8) -> Option<Ref> {
        let r = match r.kind {
            Kind::N16 => {
                let n = self.n16.get_mut(r.idx);
                if let Some(i) = n.find(b) {
                    n.remove(i);
                }
                r
            }
            Kind::N64 => {
                let n = self.n64.get_mut(r.idx);
                if let Some(i) = n.find(b) {
                    n.remove(i);
                }
                self.shrink64(r)
            }
            Kind::N256 => {
                let n = self.n256.get_mut(r.idx);
                n.vals[usize::from(b)] = EMPTY.to_le_bytes();
                n.count -= 1;
                self.shrink256(r)
            }
        };
        match self.count(r) {
            0 => {
                self.retire(r, None);
                None
            }
            1 => Some(self.merge_single(r)),
            _ => Some(r),
        }
    }

    fn shrink64(&mut self, r: Ref) -> Ref {
        let n = self.n64.get(r.idx);
        let count = usize::from(n.count);
        if count > 12 || usize::from(n.plen) > Small::<16>::room(count) {
            return r;
        }
        let old = n.clone();
        let mut s = Small::<16>::new();
        for (b, w) in old.slots() {
            s.push(b, w);
        }
        s.set_prefix(old.prefix());
        let nr = Ref {
            kind: Kind::N16,
            idx: self.n16.alloc(s),
        };
        self.retire(r, Some(nr));
        nr
    }

    fn shrink256(&mut self, r: Ref) -> Ref {
        if self.count(r) > 48 {
            return r;
        }
        let mut s = Small::<64>::new();
        for (b, w) in self.slots(r) {
            s.push(b, w);
        }
        let nr = Ref {
            kind: Kind::N64,
            idx: self.n64.alloc(s),
        };
        self.retire(r, Some(nr));
        nr
    }

    /// A node left with one child node is merged into it when the joined prefix fits there.
    fn merge_single(&mut self, r: Ref) -> Ref {
        let slots = self.slots(r);
        let Some(&(b, w)) = slots.first() else {
            return r;
        };
        let Some(c) = Ref::from_word(w) else {
            return r;
        };
        let mut joined = self.prefix(r).to_vec();
        joined.push(b);
        joined.extend_from_slice(self.prefix(c));
        let fits = match c.kind {
            Kind::N16 => joined.len() <= Small::<16>::room(self.count(c)),
            Kind::N64 => joined.len() <= Small::<64>::room(self.count(c)),
            Kind::N256 => false,
        };
        if !fits {
            return r;
        }
        match c.kind {
            Kind::N16 => self.n16.get_mut(c.idx).set_prefix(&joined),
            Kind::N64 => self.n64.get_mut(c.idx).set_prefix(&joined),
            Kind::N256 => return r,
        }
        self.retire(r, None);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;

    impl Cart {
        /// Every way the jump table disagrees with the tree: an entry must name a node that is
        /// in the tree and whose slot path is the entry's stem and tail, and the stems must
        /// be exactly the ones entries refer to, each counted once per entry.
        fn jump_problems(&self) -> Vec<String> {
            // Slot path of every node in the tree.
            let mut paths: HashMap<u32, (u64, Vec<u8>)> = HashMap::new();
            fn visit(
                c: &Cart,
                pino: u64,
                r: Ref,
                mut path: Vec<u8>,
                out: &mut HashMap<u32, (u64, Vec<u8>)>,
            ) {
                path.extend_from_slice(c.prefix(r));
                if let Some(p) = pack(r) {
                    out.insert(p, (pino, path.clone()));
                }
                for (b, w) in c.slots(r) {
                    if let (Some(child), true) = (Ref::from_word(w), b != 0) {
                        let mut below = path.clone();
                        below.push(b);
                        visit(c, pino, child, below, out);
                    }
                }
            }
            for (&pino, &w) in &self.roots {
                visit(
                    self,
                    pino,
                    Ref::from_word(w).unwrap(),
                    Vec::new(),
                    &mut paths,
                );
            }
            let mut problems = Vec::new();
            let mut refs: HashMap<u32, u32> = HashMap::new();
            for e in self.leaves.table.entries() {
                let stem = (e >> (PACK_BITS + 16)) as u32 - 1;
                let tail = (e >> PACK_BITS) as u16;
                let node = e as u32 & ((1 << PACK_BITS) - 1);
                *refs.entry(stem).or_default() += 1;
                let s = &self.stems.arena[stem as usize];
                let mut want = s.path[..usize::from(s.len)].to_vec();
                want.extend_from_slice(&tail.to_le_bytes());
                match paths.get(&node) {
                    Some((pino, path)) if *pino == s.pino && *path == want => {}
                    found => problems.push(format!(
                        "entry {:?} in dir {} names node {node:#x} with path {found:?}",
                        String::from_utf8_lossy(&want),
                        s.pino
                    )),
                }
            }
            if self.leaves.len() != refs.values().sum::<u32>() as usize {
                problems.push(format!(
                    "{} entries counted as {}",
                    refs.values().sum::<u32>(),
                    self.leaves.len()
                ));
            }
            let live: Vec<u32> = self.stems.index.entries().map(|v| v - 1).collect();
            if live.len() != self.stems.live || live.len() != refs.len() {
                problems.push(format!(
                    "{} indexed stems, {} counted live, {} referenced",
                    live.len(),
                    self.stems.live,
                    refs.len()
                ));
            }
            for id in live {
                let s = &self.stems.arena[id as usize];
                if refs.get(&id).copied() != Some(s.refs) {
                    problems.push(format!(
                        "stem {id} counts {} references, has {:?}",
                        s.refs,
                        refs.get(&id)
                    ));
                }
                if self.stems.find(s.pino, &s.path[..usize::from(s.len)]) != Some(id) {
                    problems.push(format!("stem {id} is not found by its bytes"));
                }
            }
            problems
        }

        /// The value of a dentry by a walk from the root (no jump).
        fn get_by_walk(&self, pino: u64, name: &[u8]) -> Option<u64> {
            let mut buf = [0; KEY_PAD + MAX_NAME + 1];
            self.lookup_from_root(pino, &Key::new(&mut buf, name))
        }
    }

    fn structured(prefix: &str, i: u64) -> Vec<u8> {
        format!("{prefix}.{}.{}", i / 100, i % 100).into_bytes()
    }

    #[test]
    fn lookups_of_structured_names_jump_to_the_node_holding_them() {
        let mut c = Cart::new();
        for i in 0..20_000u64 {
            c.insert(5, &structured("mdtest_files", i), i).unwrap();
        }
        assert!(c.jump_problems().is_empty(), "{:?}", c.jump_problems());
        let mut jumped = 0;
        for i in 0..20_000u64 {
            let name = structured("mdtest_files", i);
            assert_eq!(c.get(5, &name), Some(i));
            let mut buf = [0; KEY_PAD + SHORT_NAME];
            let key = Key::new(&mut buf, &name);
            if let Some(n) = c.jump(5, &key) {
                jumped += 1;
                let holder = c.node_at(5, &name, name.len() - 1).unwrap();
                assert_eq!(
                    pack(holder).map(|p| c.packed(p).prefix_len()),
                    Some(n.prefix_len())
                );
            }
        }
        // Names whose last digit pairs share a holder with at least three others jump: all
        // but the first hundred (one-digit second numbers sit in nodes of their own).
        assert!(jumped >= 19_000, "{jumped} of 20000 lookups jumped");
        assert_eq!(c.get(5, b"mdtest_files.3.100"), None);
        assert_eq!(c.get(6, b"mdtest_files.3.10"), None);
        assert_eq!(c.get(5, b"mdtest_files.3.1"), Some(301));
    }

    #[test]
    fn lookups_and_removes_while_the_jump_table_moves_find_entries_in_both_tables() {
        let mut c = Cart::new();
        let mut moves_seen = 0;
        for i in 0..20_000u64 {
            c.insert(5, &structured("mdtest_files", i), i).unwrap();
            if !c.leaves.table.moving() {
                continue;
            }
            // Mid-move: every name so far still jumps right, and the checker sees the
            // entries of both tables. Remove and put back one name whose entry may sit in
            // the old table (each thousand's first names are the oldest).
            moves_seen += 1;
            if moves_seen % 4 == 1 {
                assert!(
                    c.jump_problems().is_empty(),
                    "at {i}: {:?}",
                    c.jump_problems()
                );
                for j in (0..=i).step_by(97) {
                    assert_eq!(c.get(5, &structured("mdtest_files", j)), Some(j));
                }
                let old = structured("mdtest_files", i / 2);
                assert_eq!(c.remove(5, &old), Some(i / 2));
                assert_eq!(c.get(5, &old), None);
                c.insert(5, &old, i / 2).unwrap();
                assert!(
                    c.jump_problems().is_empty(),
                    "at {i}: {:?}",
                    c.jump_problems()
                );
            }
        }
        assert!(moves_seen > 0, "the jump table never moved");
        for i in 0..20_000u64 {
            assert_eq!(c.get(5, &structured("mdtest_files", i)), Some(i));
        }
    }

    #[test]
    fn jump_entries_follow_nodes_through_removes_and_reuse() {
        // Fill, empty and refill with other names of the same lengths, so that freed nodes
        // are reused under other paths: no lookup may reach a node through a stale entry.
        let mut c = Cart::new();
        let mut model = BTreeMap::new();
        for round in 0..4u64 {
            let prefix = ["run", "ruN", "run", "xyz"][round as usize];
            for i in 0..3_000u64 {
                let name = structured(prefix, i);
                c.insert(9, &name, round * 10_000 + i).unwrap();
                model.insert(name, round * 10_000 + i);
            }
            assert!(
                c.jump_problems().is_empty(),
                "round {round}: {:?}",
                c.jump_problems()
            );
            // Remove most, in an order that empties nodes one by one and merges chains.
            for i in (0..3_000u64).filter(|i| i % 7 != 3) {
                let name = structured(prefix, (i * 1_237) % 3_000);
                assert_eq!(c.remove(9, &name), model.remove(&name));
                if i % 500 == 0 {
                    assert!(
                        c.jump_problems().is_empty(),
                        "round {round}: {:?}",
                        c.jump_problems()
                    );
                }
            }
            assert!(
                c.jump_problems().is_empty(),
                "round {round}: {:?}",
                c.jump_problems()
            );
            for p in ["run", "ruN", "xyz"] {
                for i in 0..3_000u64 {
                    let name = structured(p, i);
                    assert_eq!(c.get(9, &name), model.get(&name).copied(), "{p} {i}");
                }
            }
        }
    }

    #[test]
    fn node_growth_and_shrinking_keep_jump_entries_exact() {
        // Holders that grow to Node64 and Node256 and shrink back move to other arenas.
        let mut c = Cart::new();
        let tails: Vec<u8> = (1..=255u8).filter(|&b| b != b'/').collect();
        for &t in &tails {
            c.insert(2, &[b's', b't', b'e', b'm', b'x', b'y', t], u64::from(t))
                .unwrap();
        }
        assert!(c.jump_problems().is_empty(), "{:?}", c.jump_problems());
        assert_eq!(c.n256.live(), 1);
        for &t in &tails[..250] {
            assert_eq!(
                c.remove(2, &[b's', b't', b'e', b'm', b'x', b'y', t]),
                Some(u64::from(t))
            );
            assert!(c.jump_problems().is_empty(), "{:?}", c.jump_problems());
        }
        for &t in &tails[250..] {
            assert_eq!(
                c.get(2, &[b's', b't', b'e', b'm', b'x', b'y', t]),
                Some(u64::from(t))
            );
        }
    }

    #[test]
    fn names_that_are_prefixes_of_others_keep_their_own_values() {
        let mut c = Cart::new();
        for (i, n) in ["data", "data1", "data12", "d", "dxyz", "data2"]
            .iter()
            .enumerate()
        {
            assert_eq!(c.insert(7, n.as_bytes(), i as u64).unwrap(), None);
        }
        assert_eq!(c.get(7, b"data"), Some(0));
        assert_eq!(c.get(7, b"data12"), Some(2));
        assert_eq!(c.get(7, b"d"), Some(3));
        assert_eq!(c.get(7, b"dat"), None);
        assert_eq!(c.get(8, b"data"), None);
        assert_eq!(c.len(), 6);
        let names: Vec<_> = c.iter_dir(7).into_iter().map(|(n, _)| n).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "readdir is in name order");
    }

    #[test]
    fn invalid_names_and_values_are_rejected() {
        let mut c = Cart::new();
        assert!(c.insert(1, b"", 1).is_err());
        assert!(c.insert(1, b"a/b", 1).is_err());
        assert!(c.insert(1, b"a\0b", 1).is_err());
        assert!(c.insert(1, &[b'x'; 256], 1).is_err());
        assert!(c.insert(1, b"ok", MAX_VALUE + 1).is_err());
        assert!(c.is_empty());
    }

    #[test]
    fn nodes_grow_to_256_and_shrink_back_to_one_node() {
        let mut c = Cart::new();
        let names: Vec<Vec<u8>> = (1..=255u8)
            .filter(|&b| b != b'/')
            .map(|b| vec![b'p'; 40].into_iter().chain([b, b'z']).collect())
            .collect();
        for (i, n) in names.iter().enumerate() {
            c.insert(3, n, i as u64).unwrap();
        }
        assert_eq!(c.n256.live(), 1);
        for (i, n) in names.iter().enumerate() {
            assert_eq!(c.get(3, n), Some(i as u64));
        }
        for n in &names[1..] {
            assert!(c.remove(3, n).is_some());
        }
        assert_eq!(c.get(3, &names[0]), Some(0));
        assert_eq!(
            (c.n16.live(), c.n64.live()),
            (1, 0),
            "one name left needs one node"
        );
        c.remove(3, &names[0]);
        assert!(!c.has_dir(3));
    }

    #[test]
    fn structured_names_take_under_twenty_bytes_each() {
        let mut c = Cart::new();
        let n = 100_000u64;
        for i in 0..n {
            let name = format!("mdtest_tree.{}.{}", i / 1000, i % 1000);
            c.insert(1, name.as_bytes(), i).unwrap();
        }
        let per = c.memory_bytes() as f64 / n as f64;
        assert!(per < 20.0, "{per} bytes per dentry");
    }

    fn name_strategy() -> impl Strategy<Value = Vec<u8>> {
        // Shared prefixes and a small alphabet make splits, merges and growth frequent.
        let byte = prop_oneof![
            8 => prop::sample::select(b"ab.01".to_vec()),
            1 => (1u8..=255).prop_filter("no slash", |&b| b != b'/'),
        ];
        (
            prop::sample::select(vec![0usize, 1, 30, 130, 250]),
            prop::collection::vec(byte, 0..6),
        )
            .prop_map(|(stem, tail)| {
                let mut n = vec![b'q'; stem];
                n.extend(tail);
                n
            })
            .prop_filter("non-empty", |n| !n.is_empty() && n.len() <= MAX_NAME)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, Vec<u8>, u64),
        Remove(u64, Vec<u8>),
        Get(u64, Vec<u8>),
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        let pino = 0u64..3;
        prop_oneof![
            4 => (pino.clone(), name_strategy(), 0..=MAX_VALUE).prop_map(|(p, n, v)| Op::Insert(p, n, v)),
            2 => (pino.clone(), name_strategy()).prop_map(|(p, n)| Op::Remove(p, n)),
            1 => (pino, name_strategy()).prop_map(|(p, n)| Op::Get(p, n)),
        ]
    }

    fn structured_op_strategy() -> impl Strategy<Value = Op> {
        // Few stems and digits: nodes fill up to the jump threshold, then empty and merge.
        let name = (0usize..3, 0u64..6, 0u64..30)
            .prop_map(|(p, a, b)| format!("{}.{a}.{b}", ["d", "data", "dat"][p]).into_bytes());
        let pino = 0u64..2;
        prop_oneof![
            4 => (pino.clone(), name.clone(), 0..=MAX_VALUE).prop_map(|(p, n, v)| Op::Insert(p, n, v)),
            3 => (pino.clone(), name.clone()).prop_map(|(p, n)| Op::Remove(p, n)),
            1 => (pino, name).prop_map(|(p, n)| Op::Get(p, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn jump_table_never_names_a_stale_node(ops in prop::collection::vec(structured_op_strategy(), 1..2_000)) {
            let mut c = Cart::new();
            let mut m: BTreeMap<(u64, Vec<u8>), u64> = BTreeMap::new();
            for (i, op) in ops.iter().enumerate() {
                match op.clone() {
                    Op::Insert(p, n, v) => {
                        prop_assert_eq!(c.insert(p, &n, v).unwrap(), m.insert((p, n), v));
                    }
                    Op::Remove(p, n) => prop_assert_eq!(c.remove(p, &n), m.remove(&(p, n))),
                    Op::Get(p, n) => {
                        prop_assert_eq!(c.get(p, &n), m.get(&(p, n.clone())).copied());
                        prop_assert_eq!(c.get_by_walk(p, &n), m.get(&(p, n)).copied());
                    }
                }
                if i % 64 == 0 {
                    let problems = c.jump_problems();
                    prop_assert!(problems.is_empty(), "{:?}", problems);
                }
            }
            let problems = c.jump_problems();
            prop_assert!(problems.is_empty(), "{:?}", problems);
            prop_assert_eq!(every_entry(&c), m.clone());
            for p in 0..2u64 {
                for s in ["d", "data", "dat"] {
                    for a in 0..6u64 {
                        for b in 0..30u64 {
                            let n = format!("{s}.{a}.{b}").into_bytes();
                            prop_assert_eq!(c.get(p, &n), m.get(&(p, n)).copied());
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn cart_behaves_like_a_btreemap(ops in prop::collection::vec(op_strategy(), 1..300)) {
            let mut c = Cart::new();
            let mut m: BTreeMap<(u64, Vec<u8>), u64> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(p, n, v) => {
                        prop_assert_eq!(c.insert(p, &n, v).unwrap(), m.insert((p, n), v));
                    }
                    Op::Remove(p, n) => prop_assert_eq!(c.remove(p, &n), m.remove(&(p, n))),
                    Op::Get(p, n) => prop_assert_eq!(c.get(p, &n), m.get(&(p, n)).copied()),
                }
                prop_assert_eq!(c.len(), m.len());
            }
            for p in 0..3u64 {
                let want: Vec<(Vec<u8>, u64)> = m
                    .range((p, Vec::new())..(p + 1, Vec::new()))
                    .map(|((_, n), v)| (n.clone(), *v))
                    .collect();
                prop_assert_eq!(c.iter_dir(p), want);
            }
            for ((p, n), v) in &m {
                prop_assert_eq!(c.get(*p, n), Some(*v));
            }
            prop_assert_eq!(every_entry(&c), m);
            let problems = c.jump_problems();
            prop_assert!(problems.is_empty(), "{:?}", problems);
        }
    }

    #[test]
    fn a_walk_resumed_after_each_name_visits_every_entry_of_every_node_kind_once() {
        let mut c = Cart::new();
        let mut m = BTreeMap::new();
        // Directory k: names that differ in one byte after a shared prefix, 10 (a Node16),
        // 40 (a Node64) and 250 (a Node256) of them, each also with a longer name below it.
        for (pino, count) in [(1u64, 10u8), (2, 40), (3, 250)] {
            for b in (1..=count).filter(|&b| b != b'/') {
                for name in [vec![b'p', b'.', b], vec![b'p', b'.', b, b'.', b'z']] {
                    let v = pino << 20 | u64::from(b) << 1 | (name.len() as u64 & 1);
                    c.insert(pino, &name, v).unwrap();
                    m.insert((pino, name), v);
                }
            }
            // A name that ends where the names branch: the node's slot of byte 0.
            c.insert(pino, b"p.", pino).unwrap();
            m.insert((pino, b"p.".to_vec()), pino);
        }
        assert_eq!(every_entry(&c), m);
    }

    /// Every entry, one name per walk, each walk resumed after the name before (as a
    /// checkpoint written in steps resumes); each name at most once, in order.
    fn every_entry(c: &Cart) -> BTreeMap<(u64, Vec<u8>), u64> {
        let mut seen = BTreeMap::new();
        for p in c.dirs() {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let mut next = None;
                c.for_each_in_dir(p, after.as_deref(), |n, v| {
                    next = Some((n.to_vec(), v));
                    ControlFlow::Break(())
                });
                let Some((n, v)) = next else { break };
                assert!(
                    after.as_ref().is_none_or(|a| n > *a),
                    "{p} {n:?} out of order"
                );
                assert!(seen.insert((p, n.clone()), v).is_none(), "{p} {n:?} twice");
                after = Some(n);
            }
        }
        seen
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(100))]
        /// A directory walked a few names at a time while names come and go between the
        /// pieces: every name there all along is visited once, in order, and nothing visited
        /// was absent all along.
        #[test]
        fn a_walk_in_pieces_sees_each_lasting_name_once_while_the_directory_changes(
            first in prop::collection::btree_set(prop::collection::vec(b'a'..b'e', 1..6), 1..120),
            changes in prop::collection::vec((prop::collection::vec(b'a'..b'e', 1..6), any::<bool>()), 0..200),
            piece in 1usize..9,
        ) {
            let mut c = Cart::new();
            for n in &first {
                c.insert(9, n, n.len() as u64).unwrap();
            }
            let mut touched = std::collections::BTreeSet::new();
            let mut ever: std::collections::BTreeSet<Vec<u8>> = first.clone();
            let mut changes = changes.into_iter();
            let mut seen: Vec<Vec<u8>> = Vec::new();
            loop {
                let mut got = Vec::new();
                c.for_each_in_dir(9, seen.last().map(Vec::as_slice), |n, _| {
                    got.push(n.to_vec());
                    if got.len() == piece { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
                });
                if got.is_empty() {
                    break;
                }
                seen.extend(got);
                for (n, add) in changes.by_ref().take(3) {
                    if add {
                        c.insert(9, &n, 1).unwrap();
                        ever.insert(n.clone());
                    } else {
                        c.remove(9, &n);
                    }
                    touched.insert(n);
                }
            }
            prop_assert!(seen.windows(2).all(|w| w[0] < w[1]), "out of order or twice: {:?}", seen);
            for n in first.difference(&touched) {
                prop_assert!(seen.contains(n), "{:?} was there all along and not visited", n);
            }
            for n in &seen {
                prop_assert!(ever.contains(n), "{:?} never existed", n);
            }
        }
    }
}
