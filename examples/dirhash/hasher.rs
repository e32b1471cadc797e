//! The file hasher: opens one file safely, reads it in bounded pieces and
//! computes its BLAKE3 hash, splitting long files into subtrees joined in
//! parallel. Owns the read buffers; it must never hold a buffer across a call
//! that could start another job of the same pool (see "Memory" in main.rs).
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root, ChainingValue, HasherExt, Mode,
};
use blake3::Hash;

use crate::engine::Spawner;
use crate::Ctx;

/// Files shorter than this are read rather than mapped even with `--mmap`
/// (b3sum's threshold: mapping small files is not worth it).
pub(crate) const MMAP_MIN: u64 = 16 * 1024;

thread_local! {
    /// The read buffer of the job running on this thread (see "Memory").
    static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's buffer, grown to at least `len` bytes. `f` must
/// not call into the pool (it would not be wrong, only unbounded in memory).
pub(crate) fn with_buf<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    BUF.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            f(&mut buf[..len])
        }
        // Not reachable with the code below (no pool call while borrowed), but
        // a fresh buffer is a safe answer rather than a panic.
        Err(_) => f(&mut vec![0; len]),
    })
}

pub(crate) fn path_of(bytes: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(bytes))
}

/// Where the bytes of a file come from: positional reads, or a memory map.
pub(crate) enum Source<'a> {
    Read(&'a File),
    Map(&'a [u8]),
}

impl Source<'_> {
    /// Calls `f` with exactly the bytes `[off, off + len)`.
    fn with_range<R>(&self, off: u64, len: u64, f: impl FnOnce(&[u8]) -> R) -> io::Result<R> {
        match self {
            Source::Map(map) => {
                let end = off.checked_add(len).filter(|&e| e <= map.len() as u64);
                match end {
                    Some(end) => Ok(f(&map[off as usize..end as usize])),
                    None => Err(shrank()),
                }
            }
            Source::Read(file) => with_buf(len as usize, |buf| {
                let mut done = 0;
                while done < buf.len() {
                    match file.read_at(&mut buf[done..], off + done as u64) {
                        Ok(0) => return Err(shrank()),
                        Ok(n) => done += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(f(buf))
            }),
        }
    }
}

pub(crate) fn shrank() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "file shrank while it was being hashed",
    )
}

/// Opens a file for hashing without ever blocking (FIFOs) and, when walking,
/// without following a symlink that replaced it. Fails unless it is a regular file.
pub(crate) fn open_regular(path: &Path, follow: bool) -> io::Result<(File, u64)> {
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EISDIR));
    }
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok((file, meta.len()))
}

/// The BLAKE3 hash of one file, splitting it into subtrees when it is longer
/// than a piece.
pub(crate) fn hash_file<'s, S: Spawner<'s>>(
    ctx: &Ctx,
    path: &[u8],
    follow: bool,
) -> io::Result<Hash> {
    let (file, len) = open_regular(path_of(path), follow)?;
    if ctx.mmap && len >= MMAP_MIN && len <= isize::MAX as u64 {
        // SAFETY: the map is read-only and private to this call. If another
        // process truncates the file meanwhile, reading the map can fault
        // (SIGBUS); that is the documented risk of `--mmap`, as in b3sum.
        let map = unsafe { memmap2::MmapOptions::new().len(len as usize).map(&file)? };
        return hash_source::<S>(ctx, &Source::Map(&map), len);
    }
    if len <= ctx.piece {
        return hash_small(ctx, &file, len);
    }
    hash_source::<S>(ctx, &Source::Read(&file), len)
}

/// A file that fits in one piece: read it to its end (it may have grown).
pub(crate) fn hash_small(ctx: &Ctx, file: &File, len: u64) -> io::Result<Hash> {
    // One byte more than the size, so that EOF usually shows in the same call.
    let cap = (len + 1).max(64 * 1024).min(ctx.piece) as usize;
    with_buf(cap, |buf| {
        let mut hasher = blake3::Hasher::new();
        let mut off = 0u64;
        loop {
            match file.read_at(buf, off) {
                Ok(0) => return Ok(hasher.finalize()),
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    off += n as u64;
                    ctx.add_bytes(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    })
}

pub(crate) fn hash_source<'s, S: Spawner<'s>>(
    ctx: &Ctx,
    src: &Source,
    len: u64,
) -> io::Result<Hash> {
    if len <= ctx.piece || len <= blake3::CHUNK_LEN as u64 {
        let hash = src.with_range(0, len, blake3::hash)?;
        ctx.add_bytes(len as usize);
        return Ok(hash);
    }
    let left = left_subtree_len(len);
    let (l, r) = S::join(
        || subtree_cv::<S>(ctx, src, 0, left),
        || subtree_cv::<S>(ctx, src, left, len - left),
    );
    Ok(merge_subtrees_root(&l?, &r?, Mode::Hash))
}

/// The chaining value of the subtree `[off, off + len)`: `off` is a multiple of
/// a power of two >= `len` rounded up, as `left_subtree_len` splits guarantee.
pub(crate) fn subtree_cv<'s, S: Spawner<'s>>(
    ctx: &Ctx,
    src: &Source,
    off: u64,
    len: u64,
) -> io::Result<ChainingValue> {
    if len <= ctx.piece || len <= blake3::CHUNK_LEN as u64 {
        let cv = src.with_range(off, len, |bytes| {
            blake3::Hasher::new()
                .set_input_offset(off)
                .update(bytes)
                .finalize_non_root()
        })?;
        ctx.add_bytes(len as usize);
        return Ok(cv);
    }
    let left = left_subtree_len(len);
    let (l, r) = S::join(
        || subtree_cv::<S>(ctx, src, off, left),
        || subtree_cv::<S>(ctx, src, off + left, len - left),
    );
    Ok(merge_subtrees_non_root(&l?, &r?, Mode::Hash))
}
