//! Chaos scheduling: random yields and short sleeps at the steps of the atomic protocols.
//!
//! This module owns [`point`], called between a compare-and-swap (or another publishing atomic)
//! and whatever follows it in the token table, the latches and the scheduler. In normal builds it
//! is an empty inline function. Built with `--cfg treepool_chaos` (`.ci/run` does, for the stress
//! tests, with and without AddressSanitizer), each call yields the CPU or sleeps for a few
//! microseconds now and then, so that windows a few instructions wide open wide enough for the
//! other threads of a test to run into them. It must never change what the code does, only when.

/// A place where another thread may run before this one goes on.
#[inline(always)]
pub fn point() {
    #[cfg(treepool_chaos)]
    imp::point();
}

#[cfg(treepool_chaos)]
mod imp {
    use std::cell::Cell;
    use std::time::Duration;

    std::thread_local! {
        /// xorshift64 state, seeded per thread from the address of the thread-local itself.
        static STATE: Cell<u64> = const { Cell::new(0) };
    }

    /// One step of the thread's generator.
    fn next() -> u64 {
        STATE.with(|s| {
            let mut x = s.get();
            if x == 0 {
                x = (s as *const Cell<u64> as u64) | 1;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.set(x);
            x
        })
    }

    /// Yields at one point in 4, sleeps 1–64 µs at one in 64.
    pub fn point() {
        let r = next();
        if r % 64 == 0 {
            std::thread::sleep(Duration::from_micros(1 + (r >> 8) % 64));
        } else if r % 4 == 0 {
            std::thread::yield_now();
        }
    }
}
