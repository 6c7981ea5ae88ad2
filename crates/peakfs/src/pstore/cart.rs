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

use std::collections::HashMap;
use std::ops::ControlFlow;

use super::table::U64Map;

/// The largest dentry value (the top bit tags child references).
pub const MAX_VALUE: u64 = (1 << 63) - 1;
/// The longest name, in bytes.
pub const MAX_NAME: usize = 255;

const CHILD: u64 = 1 << 63;
const EMPTY: u64 = u64::MAX;
const CHUNK: usize = 1024;

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

    fn find(&self, b: u8) -> Option<usize> {
        // Branch-free: one flag bit per key, masked by the count. A branch on which key
        // matched would depend on a node that random lookups have just missed in cache; its
        // mispredictions flush the loads that the core has already started for the next lookup.
        let (blocks, _) = self.keys.as_chunks::<16>();
        let mut hits = 0u64;
        for (c, k) in blocks.iter().enumerate() {
            hits |= u64::from(eq_mask16(k, b)) << (c * 16);
        }
        hits &= u64::MAX
            .checked_shr(64 - u32::from(self.count))
            .unwrap_or(0);
        (hits != 0).then(|| hits.trailing_zeros() as usize)
    }

    fn val(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.vals[i])
    }

    /// One lookup step: strips the prefix from `key`, then finds the slot of the next byte.
    /// Returns the slot byte, the key after it and the slot's word.
    #[inline]
    fn step<'k>(&self, key: &'k [u8]) -> Option<(u8, &'k [u8], u64)> {
        let (b, rest) = split(strip(key, self.prefix())?);
        let i = self.find(b)?;
        Some((b, rest, self.val(i)))
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

/// A chunked arena with a free list: chunks never move, so memory grows by at most one chunk.
#[derive(Debug)]
struct Arena<T> {
    chunks: Vec<Vec<T>>,
    free: Vec<u32>,
}

impl<T> Arena<T> {
    fn new() -> Self {
        Self {
            chunks: Vec::new(),
            free: Vec::new(),
        }
    }

    fn alloc(&mut self, node: T) -> u32 {
        if let Some(i) = self.free.pop() {
            *self.get_mut(i) = node;
            return i;
        }
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::new());
        }
        let n = self.chunks.len() - 1;
        let last = &mut self.chunks[n];
        last.push(node);
        (n * CHUNK + last.len() - 1) as u32
    }

    fn get(&self, i: u32) -> &T {
        let i = i as usize;
        &self.chunks[i / CHUNK][i % CHUNK]
    }

    fn get_mut(&mut self, i: u32) -> &mut T {
        let i = i as usize;
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }

    fn release(&mut self, i: u32) {
        self.free.push(i);
    }

    fn bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|c| c.capacity() * size_of::<T>())
            .sum::<usize>()
            + self.chunks.capacity() * size_of::<Vec<T>>()
            + self.free.capacity() * 4
    }
}

/// Bit `i` set where `keys[i] == b`: one SSE2 byte compare and mask move.
#[cfg(target_arch = "x86_64")]
#[inline]
fn eq_mask16(keys: &[u8; 16], b: u8) -> u32 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set_epi64x, _mm_set1_epi8};
    let (words, _) = keys.as_chunks::<8>();
    let (lo, hi) = (i64::from_le_bytes(words[0]), i64::from_le_bytes(words[1]));
    // SAFETY: these intrinsics only need SSE2, which every x86_64 CPU has; they take values,
    // not pointers.
    unsafe {
        let v = _mm_set_epi64x(hi, lo);
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
    /// Random lookups are bound by cache misses, and within a node the header (count, prefix
    /// length), the prefix (value tail) and the matching value are each a dependent load on
    /// another line: load the node's lines at once so a level costs one miss, not three.
    fn prefetch(self, rest: &[u8]) {
        match self {
            Self::N16(s) => prefetch_lines(s, [0, 64, 128, size_of::<Small<16>>() - 1]),
            // Header lines and the prefix tail; the value line is known only after the search.
            Self::N64(s) => prefetch_lines(s, [0, 64, size_of::<Small<64>>() - 1]),
            // No prefix: the slot of the next key byte is the only line needed.
            Self::N256(s) => {
                let b = rest.first().copied().unwrap_or(0);
                prefetch_lines(s, [usize::from(b) * 8]);
            }
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

/// The dentry index of one worker: `(parent ino, name) -> value` (an ino or an inode offset).
#[derive(Debug)]
pub struct Cart {
    roots: U64Map<u64>,
    n16: Arena<Small<16>>,
    n64: Arena<Small<64>>,
    n256: Arena<Node256>,
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

/// `key` without its front `p`, or `None`.
#[inline]
fn strip<'k>(key: &'k [u8], p: &[u8]) -> Option<&'k [u8]> {
    let (head, rest) = key.split_at_checked(p.len())?;
    same(head, p).then_some(rest)
}

/// `a == b`. Prefixes are mostly a few bytes: two overlapping word compares beat both a byte
/// loop and the `memcmp` call that `==` makes.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    fn word<const W: usize>(s: &[u8], at: usize) -> [u8; W] {
        s[at..at + W].try_into().unwrap_or([0; W])
    }
    let n = a.len();
    if b.len() != n {
        return false;
    }
    match n {
        0 => true,
        1..4 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..8 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        _ => a == b,
    }
}

fn common_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Cart {
    /// An empty index.
    pub fn new() -> Self {
        Self {
            roots: HashMap::default(),
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
        self.n16.bytes() + self.n64.bytes() + self.n256.bytes() + buckets * 17 + 16
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
        Ok(old)
    }

    /// The value of a dentry.
    pub fn get(&self, pino: u64, name: &[u8]) -> Option<u64> {
        let mut n = self.node(Ref::from_word(*self.roots.get(&pino)?)?);
        let mut key = name;
        loop {
            // One arena access per level: prefix, search and value come from the same node.
            let (b, rest, w) = match n {
                NodeRef::N16(s) => s.step(key)?,
                NodeRef::N64(s) => s.step(key)?,
                NodeRef::N256(s) => {
                    let (b, rest) = split(key);
                    (b, rest, s.val(b)?)
                }
            };
            match Ref::from_word(w) {
                Some(c) => {
                    if b == 0 {
                        return None;
                    }
                    n = self.node(c);
                    n.prefetch(rest);
                    key = rest;
                }
                None => return rest.is_empty().then_some(w),
            }
        }
    }

    /// Removes a dentry; returns its value.
    pub fn remove(&mut self, pino: u64, name: &[u8]) -> Option<u64> {
        if name.is_empty() || name.contains(&0) {
            return None;
        }
        let r = Ref::from_word(*self.roots.get(&pino)?)?;
        let (nr, old) = self.remove_at(r, name);
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

    /// Visits the dentries of `pino` in name order, starting after `after` if given, until `f`
    /// breaks.
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
        let mut visit = |name: &[u8], v: u64| {
            if after.is_some_and(|a| name <= a) {
                ControlFlow::Continue(())
            } else {
                f(name, v)
            }
        };
        let _ = self.walk(r, &mut path, &mut visit);
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

    /// Every dentry, directory by directory (for checkpoints).
    pub fn for_each(&self, mut f: impl FnMut(u64, &[u8], u64)) {
        let mut pinos: Vec<u64> = self.roots.keys().copied().collect();
        pinos.sort_unstable();
        for pino in pinos {
            self.for_each_in_dir(pino, None, |n, v| {
                f(pino, n, v);
                ControlFlow::Continue(())
            });
        }
    }

    fn walk(
        &self,
        r: Ref,
        path: &mut Vec<u8>,
        f: &mut impl FnMut(&[u8], u64) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let base = path.len();
        path.extend_from_slice(self.prefix(r));
        let mut slots = self.slots(r);
        slots.sort_unstable_by_key(|&(b, _)| b);
        for (b, w) in slots {
            let len = path.len();
            if b != 0 {
                path.push(b);
            }
            match Ref::from_word(w) {
                Some(c) => self.walk(c, path, f)?,
                None => f(path, w)?,
            }
            path.truncate(len);
        }
        path.truncate(base);
        ControlFlow::Continue(())
    }

    // ---- node primitives ----

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

    fn free_node(&mut self, r: Ref) {
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
        self.n16.release(r.idx);
        Ref {
            kind: Kind::N64,
            idx: self.n64.alloc(n),
        }
    }

    /// Node64 to Node256; the prefix moves to a parent chain (Node256 has none).
    fn grow64(&mut self, r: Ref) -> Ref {
        let old = self.n64.get(r.idx).clone();
        let mut n = Node256::new();
        for (b, w) in old.slots() {
            n.vals[usize::from(b)] = w.to_le_bytes();
        }
        n.count = u16::from(old.count);
        self.n64.release(r.idx);
        let nr = Ref {
            kind: Kind::N256,
            idx: self.n256.alloc(n),
        };
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
                self.free_node(r);
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
        self.n64.release(r.idx);
        Ref {
            kind: Kind::N16,
            idx: self.n16.alloc(s),
        }
    }

    fn shrink256(&mut self, r: Ref) -> Ref {
        if self.count(r) > 48 {
            return r;
        }
        let mut s = Small::<64>::new();
        for (b, w) in self.slots(r) {
            s.push(b, w);
        }
        self.n256.release(r.idx);
        Ref {
            kind: Kind::N64,
            idx: self.n64.alloc(s),
        }
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
        self.free_node(r);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use proptest::prelude::*;

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
        assert_eq!(c.n256.chunks.iter().map(Vec::len).sum::<usize>(), 1);
        for (i, n) in names.iter().enumerate() {
            assert_eq!(c.get(3, n), Some(i as u64));
        }
        for n in &names[1..] {
            assert!(c.remove(3, n).is_some());
        }
        assert_eq!(c.get(3, &names[0]), Some(0));
        let live16 = c.n16.chunks.iter().map(Vec::len).sum::<usize>() - c.n16.free.len();
        let live64 = c.n64.chunks.iter().map(Vec::len).sum::<usize>() - c.n64.free.len();
        assert_eq!((live16, live64), (1, 0), "one name left needs one node");
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
        }
    }
}
