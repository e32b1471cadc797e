//! The output: b3sum's line format and escaping, and the sorted listing.
//! It must never change a byte of what b3sum would print.
use std::io::{self, BufWriter, Write};

use blake3::Hash;

/// b3sum's rendering of a path: lossy UTF-8, then `\` -> `\\` and newline ->
/// `\n`, with the line starting with `\` when anything was escaped.
pub(crate) fn escape_path(path: &[u8]) -> (bool, String) {
    let text = String::from_utf8_lossy(path);
    if text.contains(['\\', '\n']) {
        (true, text.replace('\\', "\\\\").replace('\n', "\\n"))
    } else {
        (false, text.into_owned())
    }
}

pub(crate) fn write_line(out: &mut impl Write, path: &[u8], hash: &Hash) -> io::Result<()> {
    let (escaped, text) = escape_path(path);
    if escaped {
        out.write_all(b"\\")?;
    }
    writeln!(out, "{}  {}", hash.to_hex(), text)
}

/// Writes the sorted results; a closed pipe just stops the output.
pub(crate) fn print_results(mut results: Vec<(Vec<u8>, Hash)>) -> io::Result<()> {
    results.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    for (path, hash) in &results {
        write_line(&mut out, path, hash)?;
    }
    out.flush()
}
