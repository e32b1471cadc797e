//! The check mode (`--check FILE`): parses a b3sum checksum list with b3sum's
//! rules and messages, hashes the listed files in parallel (one job each) and
//! reports them in the list's order. It must never follow b3sum's stdin
//! convention for `-` or block on a FIFO.
use std::fs::File;
use std::io::{self, BufRead, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use blake3::Hash;

use crate::engine::{Jobs, Pool, Spawner};
use crate::hasher::hash_file;
use crate::{Ctx, NAME};

pub(crate) struct CheckLine {
    /// The path as written in the list (with the leading `\` if escaped).
    shown: String,
    path: PathBuf,
    expected: Hash,
}

pub(crate) fn hex_nibble(c: u8) -> Result<u8, String> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err("Invalid hex".into()),
    }
}

pub(crate) fn unescape(path: &str) -> Result<String, String> {
    let mut out = String::with_capacity(path.len());
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            _ => return Err("Invalid backslash escape".into()),
        }
    }
    Ok(out)
}

/// Parses one line of a b3sum checkfile, with b3sum's rules and messages.
pub(crate) fn parse_check_line(line: &str) -> Result<CheckLine, String> {
    let mut line = line.trim_end_matches('\n');
    let escaped = line.starts_with('\\');
    if line.is_empty() {
        return Err("Empty line".into());
    }
    if escaped {
        line = &line[1..];
    }
    let hex_len = 2 * blake3::OUT_LEN;
    let prefix = hex_len + 2;
    let bytes = line.as_bytes();
    if bytes.len() <= prefix {
        return Err("Short line".into());
    }
    if !bytes[..prefix].is_ascii() {
        return Err("Non-ASCII prefix".into());
    }
    if &bytes[hex_len..prefix] != b"  " {
        return Err("Invalid space".into());
    }
    let mut hash = [0u8; blake3::OUT_LEN];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = 16 * hex_nibble(bytes[2 * i])? + hex_nibble(bytes[2 * i + 1])?;
    }
    let file_string = &line[prefix..];
    let path = if escaped {
        unescape(file_string)?
    } else {
        file_string.to_string()
    };
    if path.contains('\0') {
        return Err("Null character in path".into());
    }
    if path.contains('\u{FFFD}') {
        return Err("Unicode replacement character in path".into());
    }
    let shown = if escaped {
        format!("\\{file_string}")
    } else {
        file_string.to_string()
    };
    Ok(CheckLine {
        shown,
        path: PathBuf::from(path),
        expected: Hash::from(hash),
    })
}

pub(crate) type CheckSlot = Mutex<Option<io::Result<Hash>>>;

pub(crate) struct Check<'a> {
    lines: &'a [Result<CheckLine, String>],
    slots: &'a [CheckSlot],
}

impl<'a> Jobs<'a> for Check<'a> {
    fn start<S: Spawner<'a>>(self, s: &S, ctx: &'a Ctx) {
        for (line, slot) in self.lines.iter().zip(self.slots) {
            if let Ok(line) = line {
                s.spawn_job(move |_: &S| {
                    let hash = hash_file::<S>(ctx, line.path.as_os_str().as_bytes(), true);
                    if hash.is_ok() {
                        ctx.file_done();
                    }
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(hash);
                });
            }
        }
    }
}

pub(crate) fn read_check_list(file: &Path) -> io::Result<Vec<Result<CheckLine, String>>> {
    let reader: Box<dyn BufRead> = if file == Path::new("-") {
        Box::new(io::BufReader::new(io::stdin()))
    } else {
        Box::new(io::BufReader::new(File::open(file)?))
    };
    let mut lines = Vec::new();
    for raw in reader.split(b'\n') {
        let raw = raw?;
        lines.push(match String::from_utf8(raw) {
            Ok(text) => parse_check_line(&text),
            Err(_) => Err("Invalid UTF-8 in line".into()),
        });
    }
    Ok(lines)
}

pub(crate) fn run_check(pool: &Pool, ctx: &Ctx, list: &Path) -> io::Result<bool> {
    let lines = match read_check_list(list) {
        Ok(lines) => lines,
        Err(e) => {
            ctx.error(list.as_os_str().as_bytes(), &e);
            return Ok(false);
        }
    };
    let slots: Vec<CheckSlot> = lines.iter().map(|_| Mutex::new(None)).collect();
    pool.run(
        ctx,
        Check {
            lines: &lines,
            slots: &slots,
        },
    );
    if let Some(pb) = &ctx.progress {
        pb.finish_and_clear();
    }
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut failed = 0u64;
    for (line, slot) in lines.iter().zip(slots) {
        let line = match line {
            Ok(line) => line,
            Err(msg) => {
                failed += 1;
                out.flush()?;
                let _ = writeln!(io::stderr(), "{NAME}: {msg}");
                continue;
            }
        };
        match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(Ok(found)) if found == line.expected => writeln!(out, "{}: OK", line.shown)?,
            Some(Ok(_)) => {
                failed += 1;
                writeln!(out, "{}: FAILED", line.shown)?;
            }
            Some(Err(e)) => {
                failed += 1;
                writeln!(out, "{}: FAILED ({e})", line.shown)?;
            }
            None => {
                failed += 1;
                writeln!(out, "{}: FAILED (not hashed)", line.shown)?;
            }
        }
    }
    out.flush()?;
    if failed > 0 {
        let _ = writeln!(
            io::stderr(),
            "{NAME}: WARNING: {failed} computed checksum{} did NOT match",
            if failed == 1 { "" } else { "s" }
        );
    }
    Ok(failed == 0)
}
