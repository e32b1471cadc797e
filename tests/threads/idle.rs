//! An idle pool burns no CPU: process CPU time (getrusage), not wall time, over one second after
//! a burst of work. In a child process of its own, so that no other test's threads count.

use crate::common;
use crate::common::fib;

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

#[test]
fn an_idle_pool_burns_no_cpu() {
    common::isolated!(60, || {
        let pool = common::pool(4, 8);
        assert_eq!(pool.install(|| fib(25)), 75025);
        pool.scope(|s| {
            for _ in 0..1000 {
                s.spawn(|_| {});
            }
        });
        // Let the workers finish spinning and go to sleep, then measure a quiet second.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let before = cpu_seconds();
        std::thread::sleep(std::time::Duration::from_secs(1));
        let used = cpu_seconds() - before;
        assert!(
            used < 0.05,
            "an idle pool of 4 workers used {used:.3} s of CPU in 1 s"
        );
        // And it wakes up promptly for new work.
        assert_eq!(pool.install(|| fib(15)), 610);
    });
}
