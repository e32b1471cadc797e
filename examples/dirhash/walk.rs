//! The walk: one job per directory (listed, closed, then its children
//! spawned) and one per regular file, with `find -P -type f`'s rules for what
//! is listed and how paths are spelled. It must never open anything but
//! directories itself (files are opened by the hasher).
use std::os::unix::ffi::OsStrExt;

use crate::engine::{Jobs, Spawner};
use crate::hasher::{hash_file, path_of};
use crate::Ctx;

/// `find`'s way of joining: `d` + `/` + name, but `d/` + name.
pub(crate) fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    if !dir.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

pub(crate) struct Walk(pub(crate) Vec<Vec<u8>>);

impl<'a> Jobs<'a> for Walk {
    fn start<S: Spawner<'a>>(self, s: &S, ctx: &'a Ctx) {
        for root in self.0 {
            s.spawn_job(move |s| visit_root(s, ctx, root));
        }
    }
}

pub(crate) fn visit_root<'s, S: Spawner<'s>>(s: &S, ctx: &'s Ctx, path: Vec<u8>) {
    match std::fs::symlink_metadata(path_of(&path)) {
        Err(e) => ctx.error(&path, &e),
        Ok(m) if m.is_dir() => walk_dir(s, ctx, path),
        Ok(m) if m.is_file() => file_job::<S>(ctx, path),
        // A symlink, FIFO, socket or device: `find -P PATH -type f` lists nothing.
        Ok(_) => {}
    }
}

pub(crate) fn file_job<'s, S: Spawner<'s>>(ctx: &Ctx, path: Vec<u8>) {
    match hash_file::<S>(ctx, &path, false) {
        Ok(hash) => {
            ctx.push(path, hash);
            ctx.file_done();
        }
        Err(e) => ctx.error(&path, &e),
    }
}

pub(crate) fn walk_dir<'s, S: Spawner<'s>>(s: &S, ctx: &'s Ctx, dir: Vec<u8>) {
    // List first and close the directory, then spawn: spawning may wait for
    // admission, and an open handle per waiting directory would add up.
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    match std::fs::read_dir(path_of(&dir)) {
        Err(e) => {
            ctx.error(&dir, &e);
            return;
        }
        Ok(entries) => {
            for entry in entries {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        ctx.error(&dir, &e);
                        break;
                    }
                };
                let path = child_path(&dir, entry.file_name().as_bytes());
                match entry.file_type() {
                    Ok(t) if t.is_dir() => dirs.push(path),
                    Ok(t) if t.is_file() => files.push(path),
                    // Symlinks (never followed), FIFOs, sockets, devices: not
                    // listed by `find -type f`, and never opened.
                    Ok(_) => {}
                    Err(e) => ctx.error(&path, &e),
                }
            }
        }
    }
    for path in dirs {
        s.spawn_job(move |s| walk_dir(s, ctx, path));
    }
    for path in files {
        s.spawn_job(move |_: &S| file_job::<S>(ctx, path));
    }
}
