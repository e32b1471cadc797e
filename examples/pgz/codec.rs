//! The block codec: cutting the input into blocks ([`Blocks`]) and compressing
//! one block on its own ([`compress`]), pigz's way. Owns the deflate settings,
//! the compressor and the memory it reuses ([`Recycler`]); knows nothing of the
//! gzip container, the pool or files.
//!
//! Each block is compressed as raw deflate (no zlib header) by a compressor
//! that was just made and primed with the previous block's last 32 KiB as its
//! dictionary (`deflateSetDictionary`), so matches may reach back into the
//! previous block exactly as in one sequential stream, and ended with a sync
//! flush (an empty stored block, which byte-aligns the output) or, for the
//! last block, with a finish (the final-block bit). The blocks' outputs then
//! simply concatenate into one valid deflate stream. Because every block sees
//! exactly the bytes it would see in any run, the output depends only on the
//! input, the level and the block size, never on the thread count or timing.

use std::ffi::{c_int, c_uint, c_void};
use std::io::{self, Read};
use std::sync::Mutex;

use libz_rs_sys as zlib;

/// Deflate's window: how far back a match may reach, and so the dictionary
/// each block gets from its predecessor.
pub(crate) const DICT_LEN: usize = 32 * 1024;

/// A bounded stock of byte buffers handed from one block to the next, so that
/// a block's buffers are pages already mapped and touched instead of fresh
/// ones: a buffer is taken when a block is read (or compressed, or a deflate
/// state made) and given back when it is no longer needed. It never holds more
/// buffers than were in use at once, which the window bounds.
#[derive(Default)]
pub(crate) struct Recycler {
    free: Mutex<Vec<Vec<u8>>>,
}

impl Recycler {
    /// A buffer of at least `len` initialized bytes (their values are
    /// whatever its last user left).
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = self.lock().pop().unwrap_or_default();
        if buf.len() < len {
            buf.resize(len, 0);
        }
        buf
    }

    /// Gives `buf` back for the next [`Recycler::take`].
    pub(crate) fn give(&self, buf: Vec<u8>) {
        self.lock().push(buf);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        // A panic while the list is locked cannot leave it inconsistent (push
        // and pop are whole), so a poisoned lock is still usable.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One block of input, with what its compressor needs to know, in one buffer:
/// the dictionary (the previous block's last [`DICT_LEN`] bytes, fewer near
/// the start) followed by the block's own bytes.
pub(crate) struct Block {
    buf: Vec<u8>,
    dict_len: usize,
    len: usize,
    /// Whether this is the input's last block (ended with a finish).
    last: bool,
}

impl Block {
    fn dict(&self) -> &[u8] {
        &self.buf[..self.dict_len]
    }

    fn data(&self) -> &[u8] {
        &self.buf[self.dict_len..self.dict_len + self.len]
    }

    /// The dictionary and the data together: the bytes the next block's
    /// dictionary is the tail of.
    fn seen(&self) -> &[u8] {
        &self.buf[..self.dict_len + self.len]
    }
}

/// One compressed block: its deflate bytes and the CRC-32 of its input.
pub(crate) struct Compressed {
    buf: Vec<u8>,
    deflate_len: usize,
    /// The CRC-32 of the block's input, to be combined into the trailer's.
    pub(crate) crc: crc32fast::Hasher,
    /// The block's input length.
    pub(crate) len: u64,
}

impl Compressed {
    /// Raw deflate, ending byte-aligned (sync flush) or final (last block).
    pub(crate) fn deflate(&self) -> &[u8] {
        &self.buf[..self.deflate_len]
    }

    /// Gives the block's buffer back to `buffers`, the recycler it came from.
    pub(crate) fn recycle(self, buffers: &Recycler) {
        buffers.give(self.buf);
    }
}

/// The input as an iterator of blocks of `block_size` bytes (the last one
/// shorter), each carrying its dictionary, in buffers of a [`Recycler`]. It
/// reads one block ahead, to know which block is the last. An empty input
/// gives one empty last block (its deflate stream is the 2-byte empty final
/// block), so every output is a whole gzip member. A read error is yielded
/// once, and then the iterator ends.
pub(crate) struct Blocks<'a, R> {
    input: R,
    block_size: usize,
    buffers: &'a Recycler,
    /// The block read ahead, not yet handed out.
    ahead: Option<Block>,
    done: bool,
}

impl<'a, R: Read> Blocks<'a, R> {
    /// Blocks of `block_size` bytes (at least 1) read from `input` into
    /// buffers of `buffers`.
    pub(crate) fn new(input: R, block_size: usize, buffers: &'a Recycler) -> Self {
        Blocks {
            input,
            block_size: block_size.max(1),
            buffers,
            ahead: None,
            done: false,
        }
    }

    /// Reads up to one block following `prev` (none for the first block),
    /// each `read` asking for all of the rest of the block, until the block is
    /// full or the input ends (pipes give short reads).
    fn read_block(&mut self, prev: Option<&Block>) -> io::Result<Block> {
        let seen = prev.map_or(&[][..], Block::seen);
        let dict = &seen[seen.len().saturating_sub(DICT_LEN)..];
        let mut buf = self.buffers.take(dict.len() + self.block_size);
        buf[..dict.len()].copy_from_slice(dict);
        let (dict_len, end) = (dict.len(), dict.len() + self.block_size);
        let mut filled = dict_len;
        while filled < end {
            match self.input.read(&mut buf[filled..end]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buffers.give(buf);
                    return Err(e);
                }
            }
        }
        Ok(Block {
            buf,
            dict_len,
            len: filled - dict_len,
            last: false,
        })
    }

    /// The next block, marked last if it is.
    fn next_block(&mut self) -> io::Result<Block> {
        let mut block = match self.ahead.take() {
            Some(block) => block,
            None => self.read_block(None)?,
        };
        // A full block may or may not be the last: read the next one to know.
        block.last = block.len < self.block_size || {
            let ahead = self.read_block(Some(&block))?;
            if ahead.len == 0 {
                self.buffers.give(ahead.buf);
                true
            } else {
                self.ahead = Some(ahead);
                false
            }
        };
        Ok(block)
    }
}

impl<R: Read> Iterator for Blocks<'_, R> {
    type Item = io::Result<Block>;

    fn next(&mut self) -> Option<io::Result<Block>> {
        if self.done {
            return None;
        }
        let block = self.next_block();
        self.done = block.as_ref().map_or(true, |b| b.last);
        Some(block)
    }
}

/// How pgz's level `L` is made with zlib-rs: a zlib-rs level (`base`), which
/// picks the match finder and its hash, and the finder's parameters
/// (`good_length`, `max_lazy`, `nice_length`, `max_chain`), set with
/// `deflateTune` (which keeps the hash `base` chose). zlib-rs, a port of
/// zlib-ng, uses match finders of its own at its levels 1 and 3–6
/// (`deflate_quick`, `deflate_medium`): faster than classic zlib's, and 2–20 %
/// larger. pigz uses classic zlib, so pgz uses zlib's finders:
///
/// - `-4` … `-9`: zlib-rs level 9, `deflate_slow` with zlib's 3-byte rolling
///   hash (the only level that chooses it), with zlib's parameters for `L`
///   (zlib's `configuration_table`): zlib's algorithm, within 0.2 % of pigz's
///   size. zlib-rs level 7 (`deflate_slow` with its 4-byte hash) is about 35 %
///   faster but misses 3-byte matches: 1–1.7 % larger on machine code.
/// - `-1` … `-3`: zlib-rs level 2, zlib's `deflate_fast` (which has only the
///   4-byte hash), with zlib's level-1 parameters at `-1` and larger ones at
///   `-2` and `-3`, chosen by measurement so that machine code stays within
///   0.5 % of pigz's size (with zlib's own, `-2` was 1 % larger).
#[derive(Clone, Copy, Debug)]
struct Tuning {
    base: c_int,
    good: c_int,
    lazy: c_int,
    nice: c_int,
    chain: c_int,
}

const fn tuned(base: c_int, good: c_int, lazy: c_int, nice: c_int, chain: c_int) -> Tuning {
    Tuning {
        base,
        good,
        lazy,
        nice,
        chain,
    }
}

/// [`Tuning`] for levels 0–9; level 0 stores, so its parameters are unused.
const LEVELS: [Tuning; 10] = [
    tuned(0, 0, 0, 0, 0),
    tuned(2, 4, 4, 8, 4),
    tuned(2, 4, 8, 32, 32),
    tuned(2, 4, 16, 128, 128),
    tuned(9, 4, 4, 16, 16),
    tuned(9, 8, 16, 32, 32),
    tuned(9, 8, 16, 128, 128),
    tuned(9, 8, 32, 128, 256),
    tuned(9, 32, 128, 258, 1024),
    tuned(9, 32, 258, 258, 4096),
];

/// Compresses one block at `level` (0–9) as described in the module docs,
/// with a compressor made for it alone, in memory from `states`; takes its
/// output buffer from `buffers` and gives the block's buffer back there.
///
/// A fresh compressor per block, not one per thread that is reset between
/// blocks: zlib-rs's reset (`deflateReset`, as in zlib-ng) clears the hash
/// heads but keeps the old window and `prev` chain, and with reused
/// compressors the output was seen to depend on which blocks a thread had
/// compressed before (it differed between `-p 1` and `-p 2` by a few bytes;
/// the test executable's own bytes show it, see tests/pgz.rs). Making one
/// zeroes its window, hash heads and chains, so every block's bytes are a
/// function of the block, its dictionary and the level alone; its memory
/// comes from `states` (mapped and touched already), so making one costs
/// that zeroing, not a fresh mapping.
pub(crate) fn compress(
    block: Block,
    level: u32,
    buffers: &Recycler,
    states: &Recycler,
) -> io::Result<Compressed> {
    let mut state = states.take(0);
    let out = Deflater::new(level, &mut state)
        .and_then(|mut z| z.compress(&block, buffers.take(bound(block.len))));
    states.give(state);
    let (buf, deflate_len) = out?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(block.data());
    let len = block.len as u64;
    buffers.give(block.buf);
    Ok(Compressed {
        buf,
        deflate_len,
        crc,
        len,
    })
}

/// zlib's `deflateBound` for raw deflate, plus room for the sync flush's
/// empty stored block: enough output for any block in one call.
fn bound(len: usize) -> usize {
    len + (len >> 12) + (len >> 14) + (len >> 25) + 13 + 5
}

/// A zlib-rs deflate stream (raw deflate, 32 KiB window) whose one allocation
/// is lent by a [`Lease`].
struct Deflater<'m> {
    // The stream is boxed and the lease a raw pointer from `Box::into_raw`
    // (freed by Drop), so that neither moves while the stream holds the
    // lease's address as its allocator's `opaque`.
    strm: Box<zlib::z_stream>,
    lease: *mut Lease<'m>,
}

impl<'m> Deflater<'m> {
    /// A stream at pgz's `level` (see [`LEVELS`]) in the memory of `state`,
    /// grown if it is too small.
    fn new(level: u32, state: &'m mut Vec<u8>) -> io::Result<Self> {
        let t = LEVELS[level.min(9) as usize];
        let lease = Box::into_raw(Box::new(Lease {
            mem: state,
            lent: false,
        }));
        let mut z = Deflater {
            strm: Box::new(zlib::z_stream {
                zalloc: Some(Lease::alloc),
                zfree: Some(Lease::free),
                opaque: lease.cast(),
                ..zlib::z_stream::default()
            }),
            lease,
        };
        // SAFETY: `strm` is a valid, boxed z_stream with an allocator whose
        // `opaque` (the lease) lives as long as the stream (both are the
        // Deflater's, which ends the stream before it frees the lease).
        let ret = unsafe {
            zlib::deflateInit2_(
                &mut *z.strm,
                t.base,
                zlib::Z_DEFLATED,
                -15, // raw deflate, 32 KiB window
                8,   // zlib's default memLevel, as pigz uses
                zlib::Z_DEFAULT_STRATEGY,
                zlib::zlibVersion(),
                std::mem::size_of::<zlib::z_stream>() as c_int,
            )
        };
        check(ret, "deflateInit2")?;
        if t.base != 0 {
            // SAFETY: the stream was initialized above.
            let ret = unsafe { zlib::deflateTune(&mut *z.strm, t.good, t.lazy, t.nice, t.chain) };
            check(ret, "deflateTune")?;
        }
        Ok(z)
    }

    /// Compresses `block` (dictionary, data, then a sync flush or a finish)
    /// into `out`, grown if it is ever short; returns it and the length used.
    fn compress(&mut self, block: &Block, mut out: Vec<u8>) -> io::Result<(Vec<u8>, usize)> {
        let dict = block.dict();
        if !dict.is_empty() {
            // SAFETY: the stream is initialized; `dict` is valid for its length
            // (at most 32 KiB, so it fits a uInt).
            let ret = unsafe {
                zlib::deflateSetDictionary(&mut *self.strm, dict.as_ptr(), dict.len() as c_uint)
            };
            check(ret, "deflateSetDictionary")?;
        }
        let data = block.data();
        let flush = if block.last {
            zlib::Z_FINISH
        } else {
            zlib::Z_SYNC_FLUSH
        };
        self.strm.next_in = data.as_ptr();
        // Blocks are at most 512 MiB (`cli`), so the length fits a uInt.
        self.strm.avail_in = data.len() as c_uint;
        let mut used = 0;
        loop {
            let room = (out.len() - used).min(c_uint::MAX as usize);
            self.strm.next_out = out[used..].as_mut_ptr();
            self.strm.avail_out = room as c_uint;
            // SAFETY: the stream is initialized; next_in/avail_in describe the
            // rest of `data` (deflate advances them), next_out/avail_out the
            // rest of `out`, both alive and not otherwise used during the call.
            let ret = unsafe { zlib::deflate(&mut *self.strm, flush) };
            used += room - self.strm.avail_out as usize;
            match ret {
                zlib::Z_STREAM_END => break,
                // A sync flush is complete once all input is taken and the
                // output was not filled up (zlib's "avail_out != 0" rule).
                zlib::Z_OK | zlib::Z_BUF_ERROR
                    if !block.last && self.strm.avail_in == 0 && self.strm.avail_out != 0 =>
                {
                    break
                }
                zlib::Z_OK | zlib::Z_BUF_ERROR => {}
                ret => check(ret, "deflate")?,
            }
            if self.strm.avail_out == 0 {
                out.resize(out.len() + out.len() / 2 + 1024, 0);
            }
        }
        Ok((out, used))
    }
}

impl Drop for Deflater<'_> {
    fn drop(&mut self) {
        if !self.strm.state.is_null() {
            // SAFETY: the stream was initialized by `new` and is ended once
            // (deflateEnd sets `state` to null). Ending a stream that was not
            // finished returns Z_DATA_ERROR, and frees it all the same.
            unsafe { zlib::deflateEnd(&mut *self.strm) };
        }
        // SAFETY: `lease` came from `Box::into_raw` in `new`, and the stream
        // that used it is ended.
        drop(unsafe { Box::from_raw(self.lease) });
    }
}

/// zlib's return code `ret` of `what` as a result.
fn check(ret: c_int, what: &str) -> io::Result<()> {
    match ret {
        zlib::Z_OK => Ok(()),
        zlib::Z_MEM_ERROR => Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("{what}: out of memory"),
        )),
        ret => Err(io::Error::other(format!("{what}: zlib error {ret}"))),
    }
}

/// The memory one deflate stream allocates (zlib-rs makes one allocation per
/// stream, at `deflateInit2`, freed at `deflateEnd`): a buffer lent to it,
/// grown when it is too small; a second allocation while it is lent fails
/// (`Z_MEM_ERROR`), it never aliases.
struct Lease<'m> {
    mem: &'m mut Vec<u8>,
    lent: bool,
}

impl Lease<'_> {
    /// zlib's `zalloc`.
    unsafe extern "C" fn alloc(opaque: *mut c_void, items: c_uint, size: c_uint) -> *mut c_void {
        // SAFETY: `opaque` is the boxed lease of the Deflater whose stream
        // calls this, alive, and not otherwise borrowed during zlib's calls.
        let lease = unsafe { &mut *opaque.cast::<Lease>() };
        let Some(len) = (items as usize).checked_mul(size as usize) else {
            return std::ptr::null_mut();
        };
        if lease.lent {
            return std::ptr::null_mut();
        }
        if lease.mem.len() < len {
            lease.mem.resize(len, 0);
        }
        lease.lent = true;
        lease.mem.as_mut_ptr().cast()
    }

    /// zlib's `zfree`: the memory stays in the buffer for the next stream.
    unsafe extern "C" fn free(opaque: *mut c_void, _ptr: *mut c_void) {
        // SAFETY: as in `alloc`.
        let lease = unsafe { &mut *opaque.cast::<Lease>() };
        lease.lent = false;
    }
}
