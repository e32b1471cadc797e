//! The progress bar and `--stats`: everything written to stderr about the run
//! itself. It must never write to stdout.
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::Args;
use crate::engine::Pool;
use crate::{Ctx, NAME};

/// A minimal terminal for `--progress` when stderr is not a terminal
/// (indicatif hides itself there, but the user asked for the bar).
#[derive(Debug)]
pub(crate) struct ForcedStderr;

impl indicatif::TermLike for ForcedStderr {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}A")?;
        }
        Ok(())
    }
    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}B")?;
        }
        Ok(())
    }
    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}C")?;
        }
        Ok(())
    }
    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        if n > 0 {
            write!(io::stderr(), "\x1b[{n}D")?;
        }
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        writeln!(io::stderr(), "{s}")
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        write!(io::stderr(), "{s}")
    }
    fn clear_line(&self) -> io::Result<()> {
        write!(io::stderr(), "\r\x1b[2K")
    }
    fn flush(&self) -> io::Result<()> {
        io::stderr().flush()
    }
}

pub(crate) fn make_progress(args: &Args) -> Option<ProgressBar> {
    let tty = io::stderr().is_terminal();
    let want = if args.no_progress {
        false
    } else {
        args.progress || tty
    };
    if !want {
        return None;
    }
    let target = if tty {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::term_like_with_hz(Box::new(ForcedStderr), 5)
    };
    let style = ProgressStyle::with_template(
        "{spinner} {msg}, {binary_bytes} hashed, {binary_bytes_per_sec}, {elapsed}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_spinner());
    let pb = ProgressBar::with_draw_target(None, target).with_style(style);
    pb.set_message("0 files");
    pb.enable_steady_tick(Duration::from_millis(200));
    Some(pb)
}

pub(crate) fn peak_rss_kib() -> Option<i64> {
    // SAFETY: getrusage only writes the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    (rc == 0).then_some(usage.ru_maxrss)
}

pub(crate) fn print_stats(pool: &Pool, ctx: &Ctx, args: &Args, elapsed: Duration) {
    let files = ctx.files.load(Ordering::Relaxed);
    let bytes = ctx.bytes.load(Ordering::Relaxed);
    let secs = elapsed.as_secs_f64().max(1e-9);
    let mut msg = format!(
        "{NAME}: {files} file{}, {bytes} bytes in {secs:.3} s ({:.1} MiB/s), piece size {} bytes{}\n",
        if files == 1 { "" } else { "s" },
        bytes as f64 / secs / (1 << 20) as f64,
        ctx.piece,
        if args.mmap { ", mmap" } else { "" },
    );
    match pool {
        Pool::Treepool(p) => {
            let st = p.stats();
            let threads = p.current_num_threads();
            let cap = p.max_inflight();
            // The documented bound on read buffers (see the module doc, "Memory").
            let jobs = threads.min(cap.saturating_mul(st.peak_depth.max(1)));
            msg += &format!(
                "{NAME}: treepool: threads {threads} max_inflight {cap}\n\
                 {NAME}: stats: {st:?}\n\
                 {NAME}: read buffers <= piece_size x min(threads, max_inflight x levels) = {} x {jobs} = {} KiB\n",
                ctx.piece,
                ctx.piece.saturating_mul(jobs as u64) / 1024,
            );
        }
        Pool::Rayon(p) => {
            msg += &format!("{NAME}: rayon: threads {}\n", p.current_num_threads());
        }
    }
    match peak_rss_kib() {
        Some(kib) => msg += &format!("{NAME}: peak RSS {kib} KiB\n"),
        None => msg += &format!("{NAME}: peak RSS unknown\n"),
    }
    let _ = io::stderr().lock().write_all(msg.as_bytes());
}
