//! Decompression (`-d`): sequential, as pigz's is (inflate cannot start in
//! the middle of a deflate stream without an index). Owns reading gzip data,
//! with every member (pgz writes one, `gzip`/`pigz` and `cat a.gz b.gz` may
//! give several), and turning what goes wrong into messages that say whether
//! the data or the reading failed. Knows nothing of where the output goes.

use std::io::{self, BufRead, BufReader, Read, Write};

use flate2::bufread::MultiGzDecoder;
use indicatif::ProgressBar;

/// Decompresses all of `input` (named `name` in messages) into `out`.
///
/// Errors: input that is empty or does not start with the gzip magic ("not in
/// gzip format"), corrupt or truncated data, a CRC or length mismatch, and
/// trailing bytes that are not another gzip member all fail with `NAME:
/// invalid gzip data: ...`; read errors with `NAME: read error: ...`; write
/// errors come back as `out` gave them. What was written before an error is
/// the caller's to discard.
pub(crate) fn decompress(
    input: impl Read,
    name: &str,
    out: &mut impl Write,
    progress: Option<&ProgressBar>,
) -> io::Result<()> {
    let tagged = Tagged {
        inner: input,
        progress: progress.cloned(),
    };
    let mut reader = BufReader::with_capacity(256 * 1024, tagged);
    let head = reader.fill_buf().map_err(|e| describe(e, name))?;
    if head.len() < 2 || head[..2] != [0x1f, 0x8b] {
        // One more byte may be in a second read on a pipe: look again.
        let mut magic = Vec::new();
        (&mut reader)
            .take(2)
            .read_to_end(&mut magic)
            .map_err(|e| describe(e, name))?;
        if magic != [0x1f, 0x8b] {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name}: not in gzip format"),
            ));
        }
        return decode(io::Cursor::new(magic).chain(reader), name, out);
    }
    decode(reader, name, out)
}

/// The decoding loop proper.
fn decode(reader: impl BufRead, name: &str, out: &mut impl Write) -> io::Result<()> {
    let mut decoder = MultiGzDecoder::new(reader);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match decoder.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(describe(e, name)),
        };
        out.write_all(&buf[..n])?;
    }
}

/// An error of the decoder as a message: read errors of the file were tagged
/// by [`Tagged`], everything else is bad data.
fn describe(e: io::Error, name: &str) -> io::Error {
    if let Some(read) = e.get_ref().and_then(|i| i.downcast_ref::<ReadError>()) {
        let inner = match read.0.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(read.0.kind(), read.0.to_string()),
        };
        return crate::ctx(inner, format_args!("{name}: read error"));
    }
    let what = match e.kind() {
        io::ErrorKind::UnexpectedEof => "unexpected end of file (truncated?)".to_string(),
        _ => e.to_string(),
    };
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{name}: invalid gzip data: {what}"),
    )
}

/// A read error of the underlying file, kept apart from the decoder's own.
#[derive(Debug)]
struct ReadError(io::Error);

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ReadError {}

/// The input, with its read errors wrapped in [`ReadError`] and the bytes
/// read added to the progress bar.
struct Tagged<R> {
    inner: R,
    progress: Option<ProgressBar>,
}

impl<R: Read> Read for Tagged<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.inner.read(buf) {
                Ok(n) => {
                    if let Some(pb) = &self.progress {
                        pb.inc(n as u64);
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io::Error::new(e.kind(), ReadError(e))),
            }
        }
    }
}
