//! The gzip container (RFC 1952) around the concatenated block streams: the
//! 10-byte member header, the 8-byte trailer, and the running CRC-32 and
//! length that the trailer needs, combined from the per-block CRCs. Owns the
//! byte layout of one member; knows nothing of blocks, threads or files.

/// The member header. MTIME is 0 and no name is stored (as `gzip -n` /
/// `pigz -n` write it), so that the output depends only on the input, the
/// level and the block size, never on the file's name or time stamps.
pub(crate) fn header(level: u32) -> [u8; 10] {
    // XFL: 2 = maximum compression, 4 = fastest (RFC 1952; what zlib and pigz write).
    let xfl = match level {
        9 => 2,
        1 => 4,
        _ => 0,
    };
    [
        0x1f, 0x8b, // ID1, ID2
        8,    // CM = deflate
        0,    // FLG: no FNAME, no FEXTRA, no FCOMMENT, no FHCRC
        0, 0, 0, 0, // MTIME = 0 (none)
        xfl, 3, // OS = Unix
    ]
}

/// The CRC-32 and length of everything compressed so far, built by combining
/// the per-block checksums in input order (`crc32fast::Hasher::combine`, the
/// zlib `crc32_combine` algorithm: O(log n) per block, no pass over the data).
#[derive(Clone, Default)]
pub(crate) struct Checksum {
    crc: crc32fast::Hasher,
    len: u64,
}

impl Checksum {
    /// Appends one block's checksum (`block` covers `len` bytes that follow
    /// everything appended so far).
    pub(crate) fn append(&mut self, block: &crc32fast::Hasher, len: u64) {
        self.crc.combine(block);
        self.len += len;
    }

    /// The 8-byte trailer: CRC-32, then ISIZE (the length modulo 2³²), both
    /// little-endian.
    pub(crate) fn trailer(&self) -> [u8; 8] {
        let mut t = [0u8; 8];
        t[..4].copy_from_slice(&self.crc.clone().finalize().to_le_bytes());
        t[4..].copy_from_slice(&(self.len as u32).to_le_bytes());
        t
    }
}
