//! Where the output goes: standard output, or a file that appears only when it
//! is complete. Owns the temporary file beside the target, its removal on any
//! failure, the "already exists" check, and the final rename; knows nothing of
//! gzip or compression.
//!
//! A file target is written to `.NAME.pgz-PID.tmp` in the target's directory
//! (same file system, so the rename is atomic), given the input's permission
//! bits and modification time, and renamed over `NAME` only after every byte
//! was written and flushed without error. Dropping an [`AtomicFile`] that was
//! not committed removes the temporary file, so an error (a full disk, a
//! corrupt input) leaves neither a partial `NAME` nor a stray temporary file.
//!
//! Signals: [`install_signal_handlers`] ignores `SIGXFSZ` (a file size limit
//! then fails the write with `EFBIG`, reported and cleaned up like a full
//! disk, instead of killing the process mid-file) and makes `SIGINT`,
//! `SIGTERM` and `SIGHUP` remove the temporary file being written before the
//! process dies of the signal, as gzip does.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::ctx;

/// Output buffer size: blocks are written whole, this only gathers the small
/// writes (header, trailer, decompressed chunks).
const BUF: usize = 256 * 1024;

/// A target file being written under a temporary name.
pub(crate) struct AtomicFile {
    target: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Starts writing `target`. Fails if `target` exists and `force` is not
    /// set, before anything is written.
    pub(crate) fn create(target: &Path, force: bool) -> io::Result<AtomicFile> {
        if !force && fs::symlink_metadata(target).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: already exists (use -f to overwrite)", target.display()),
            ));
        }
        let name = target
            .file_name()
            .ok_or_else(|| io::Error::other(format!("{}: not a file name", target.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".pgz-{}.tmp", std::process::id()));
        let tmp = target.with_file_name(tmp_name);
        // Registered before it exists: a fatal signal right after the create
        // would otherwise find nothing to remove and leave the file behind.
        // (Unlinking a name not created yet is harmless: it carries our PID.)
        register(&tmp);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| {
                unregister();
                ctx(e, format_args!("{}: cannot create", tmp.display()))
            })?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            tmp,
            out: Some(BufWriter::with_capacity(BUF, file)),
        })
    }

    /// Flushes, copies `like`'s permission bits and modification time (as
    /// gzip does), and renames the file to its target name.
    pub(crate) fn commit(mut self, like: Option<&fs::Metadata>) -> io::Result<()> {
        let out = self.out.take().expect("committed once");
        let file = out
            .into_inner()
            .map_err(|e| ctx(e.into_error(), self.write_context()))?;
        if let Some(meta) = like {
            file.set_permissions(meta.permissions())
                .map_err(|e| ctx(e, self.write_context()))?;
            if let Ok(mtime) = meta.modified() {
                // Best effort, like gzip: a file system without time stamps is no error.
                let _ = file.set_modified(mtime);
            }
        }
        drop(file);
        fs::rename(&self.tmp, &self.target).map_err(|e| {
            ctx(
                e,
                format_args!(
                    "cannot rename {} to {}",
                    self.tmp.display(),
                    self.target.display()
                ),
            )
        })?;
        // Committed: nothing left for Drop or a signal to remove.
        unregister();
        self.tmp = PathBuf::new();
        Ok(())
    }

    fn write_context(&self) -> String {
        format!("{}: write error", self.target.display())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let ctx_msg = self.write_context();
        let out = self.out.as_mut().expect("not committed");
        out.write(buf).map_err(|e| ctx(e, ctx_msg))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let out = self.out.as_mut().expect("not committed");
        match out.write_all(buf) {
            Ok(()) => Ok(()),
            Err(e) => Err(ctx(e, self.write_context())),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        let out = self.out.as_mut().expect("not committed");
        match out.flush() {
            Ok(()) => Ok(()),
            Err(e) => Err(ctx(e, self.write_context())),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            // Drop the buffer without flushing it (a full disk would fail
            // again), then remove the partial file.
            if let Some(out) = self.out.take() {
                let (file, _unwritten) = out.into_parts();
                drop(file);
            }
            let _ = fs::remove_file(&self.tmp);
            unregister();
        }
    }
}

/// The temporary file being written, for the signal handler to remove: a
/// leaked `CString`, or null. Whoever swaps it out owns it (the handler only
/// unlinks it and leaks it, the process is about to die).
static TEMP: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

/// Makes `path` the file a fatal signal removes.
fn register(path: &Path) {
    if let Ok(c) = CString::new(path.as_os_str().as_bytes()) {
        let old = TEMP.swap(c.into_raw(), Ordering::AcqRel);
        free(old);
    }
}

/// No temporary file to remove any more.
fn unregister() {
    free(TEMP.swap(std::ptr::null_mut(), Ordering::AcqRel));
}

fn free(p: *mut libc::c_char) {
    if !p.is_null() {
        // SAFETY: every non-null pointer in TEMP came from `CString::into_raw`,
        // and the swap that returned it made this its only owner.
        drop(unsafe { CString::from_raw(p) });
    }
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let p = TEMP.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: unlink, signal and raise are async-signal-safe; `p` is a valid
    // C string that nobody else frees (this swap took it).
    unsafe {
        if !p.is_null() {
            libc::unlink(p);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs the signal dispositions described in the module docs.
pub(crate) fn install_signal_handlers() {
    let handler = on_fatal_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: plain calls of signal(2) with SIG_IGN or a handler that only
    // makes async-signal-safe calls.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // Keep an inherited "ignore" (nohup, background jobs).
            if libc::signal(sig, handler) == libc::SIG_IGN {
                libc::signal(sig, libc::SIG_IGN);
            }
        }
    }
}

/// Standard output, buffered, with write errors named as such.
pub(crate) struct Stdout(BufWriter<io::Stdout>);

impl Stdout {
    /// Buffered standard output.
    pub(crate) fn new() -> Stdout {
        Stdout(BufWriter::with_capacity(BUF, io::stdout()))
    }

    /// Flushes everything written; a failure (say, a full disk) is an error.
    pub(crate) fn finish(mut self) -> io::Result<()> {
        self.flush()
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(|e| ctx(e, "stdout: write error"))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0
            .write_all(buf)
            .map_err(|e| ctx(e, "stdout: write error"))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(|e| ctx(e, "stdout: write error"))
    }
}
