//! The block codec: cutting the input into blocks ([`Blocks`]) and compressing
//! one block on its own ([`compress`]), pigz's way. Owns the deflate settings
//! and the compressor; knows nothing of the gzip container, the
//! pool or files.
//!
//! Each block is compressed as raw deflate (no zlib header) by a compressor
//! that was reset and primed with the previous block's last 32 KiB as its
//! dictionary (`deflateSetDictionary`), so matches may reach back into the
//! previous block exactly as in one sequential stream, and ended with a sync
//! flush (an empty stored block, which byte-aligns the output) or, for the
//! last block, with a finish (the final-block bit). The blocks' outputs then
//! simply concatenate into one valid deflate stream. Because every block sees
//! exactly the bytes it would see in any run, the output depends only on the
//! input, the level and the block size, never on the thread count or timing.

use std::io::{self, Read};

use flate2::{Compress, Compression, FlushCompress, Status};

/// Deflate's window: how far back a match may reach, and so the dictionary
/// each block gets from its predecessor.
pub(crate) const DICT_LEN: usize = 32 * 1024;

/// One block of input, with what its compressor needs to know.
pub(crate) struct Block {
    /// The previous block's last [`DICT_LEN`] bytes (fewer near the start;
    /// empty for the first block).
    pub(crate) dict: Vec<u8>,
    /// The block itself (empty only when the whole input is empty).
    pub(crate) data: Vec<u8>,
    /// Whether this is the input's last block (ended with a finish).
    pub(crate) last: bool,
}

/// One compressed block: its deflate bytes and the CRC-32 of its input.
pub(crate) struct Compressed {
    /// Raw deflate, ending byte-aligned (sync flush) or final (last block).
    pub(crate) deflate: Vec<u8>,
    /// The CRC-32 of the block's input, to be combined into the trailer's.
    pub(crate) crc: crc32fast::Hasher,
    /// The block's input length.
    pub(crate) len: u64,
}

/// The input as an iterator of blocks of `block_size` bytes (the last one
/// shorter), each carrying its dictionary. It reads one block ahead, to know
/// which block is the last. An empty input gives one empty last block (its
/// deflate stream is the 2-byte empty final block), so every output is a
/// whole gzip member. A read error is yielded once, and then the iterator ends.
pub(crate) struct Blocks<R> {
    input: R,
    block_size: usize,
    /// The block read ahead, not yet handed out.
    next: Option<Vec<u8>>,
    /// The tail of the block handed out last (the next one's dictionary).
    dict: Vec<u8>,
    done: bool,
}

impl<R: Read> Blocks<R> {
    /// Blocks of `block_size` bytes (at least 1) read from `input`.
    pub(crate) fn new(input: R, block_size: usize) -> Self {
        Blocks {
            input,
            block_size: block_size.max(1),
            next: None,
            dict: Vec::new(),
            done: false,
        }
    }

    /// Reads up to one block, retrying short reads (pipes) until the block is
    /// full or the input ends.
    fn read_block(&mut self) -> io::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(self.block_size);
        (&mut self.input)
            .take(self.block_size as u64)
            .read_to_end(&mut buf)?;
        Ok(buf)
    }
}

impl<R: Read> Iterator for Blocks<R> {
    type Item = io::Result<Block>;

    fn next(&mut self) -> Option<io::Result<Block>> {
        if self.done {
            return None;
        }
        let data = match self.next.take() {
            Some(data) => data,
            None => match self.read_block() {
                Ok(data) => data,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            },
        };
        // A full block may or may not be the last: read the next one to know.
        let last = if data.len() < self.block_size {
            true
        } else {
            match self.read_block() {
                Ok(ahead) if ahead.is_empty() => true,
                Ok(ahead) => {
                    self.next = Some(ahead);
                    false
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        };
        self.done = last;
        let tail = &data[data.len().saturating_sub(DICT_LEN)..];
        let dict = if data.len() >= DICT_LEN {
            std::mem::replace(&mut self.dict, tail.to_vec())
        } else {
            // A block shorter than the window: the dictionary is the end of
            // the previous dictionary followed by this whole block.
            let mut next = self.dict.clone();
            next.extend_from_slice(tail);
            let excess = next.len().saturating_sub(DICT_LEN);
            next.drain(..excess);
            std::mem::replace(&mut self.dict, next)
        };
        Some(Ok(Block { dict, data, last }))
    }
}

/// Compresses one block at `level` (0–9) as described in the module docs,
/// with a compressor made for it alone.
///
/// A fresh compressor per block, not one per thread that is `reset()`
/// between blocks: zlib-rs's reset (`deflateReset`, as in zlib-ng) clears the
/// hash heads but keeps the old window and `prev` chain memory, while a new
/// compressor starts from zeroed memory. With reused compressors the output
/// was seen to depend on which blocks a thread had compressed before: it
/// differed between `-p 1` and `-p 2` by a few bytes (still valid deflate; the
/// test executable's own bytes show it, see tests/pgz.rs). A fresh compressor
/// makes every block's bytes a function of the block, its dictionary and the
/// level alone. Making one (about 350 KiB, allocated and zeroed) costs a few
/// per cent of a 128 KiB block's compression at level 6.
pub(crate) fn compress(block: Block, level: u32) -> io::Result<Compressed> {
    // `false`: raw deflate, no zlib header or Adler-32.
    let mut z = Compress::new(Compression::new(level), false);
    compress_with(&mut z, &block)
}

/// Compresses `block` with `z`, which was just made.
fn compress_with(z: &mut Compress, block: &Block) -> io::Result<Compressed> {
    if !block.dict.is_empty() {
        z.set_dictionary(&block.dict).map_err(io::Error::other)?;
    }
    let flush = if block.last {
        FlushCompress::Finish
    } else {
        FlushCompress::Sync
    };
    // zlib's deflateBound-like estimate; grown below if it is ever short.
    let mut out = Vec::with_capacity(block.data.len() + block.data.len() / 1000 + 64);
    let start_in = z.total_in();
    loop {
        let consumed = (z.total_in() - start_in) as usize;
        let before_out = z.total_out();
        let status = z
            .compress_vec(&block.data[consumed..], &mut out, flush)
            .map_err(io::Error::other)?;
        let all_in = (z.total_in() - start_in) as usize == block.data.len();
        match status {
            Status::StreamEnd => break,
            // A sync flush is complete once all input is taken and the output
            // buffer was not filled up (zlib's "avail_out != 0" rule).
            Status::Ok | Status::BufError
                if !block.last && all_in && out.len() < out.capacity() =>
            {
                break
            }
            _ => {}
        }
        if out.len() == out.capacity() || z.total_out() == before_out {
            out.reserve(out.capacity() / 2 + 1024);
        }
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&block.data);
    Ok(Compressed {
        deflate: out,
        crc,
        len: block.data.len() as u64,
    })
}
