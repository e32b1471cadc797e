//! The global pool: built lazily, `build_global` fails once it exists, and the environment
//! variable `TREEPOOL_NUM_THREADS` sizes default pools. In a child process of its own, so that
//! no other test races it for the global pool or the environment.

use crate::common;

#[test]
fn global_pool_and_num_threads_env() {
    common::isolated!(60, || {
        // SAFETY-free in edition 2021: no other thread of this child process reads the environment now.
        std::env::set_var(treepool::NUM_THREADS_ENV, "3");
        let pool = treepool::ThreadPoolBuilder::new().build().unwrap();
        assert_eq!(pool.current_num_threads(), 3);
        assert_eq!(pool.max_inflight(), 3 * treepool::DEFAULT_TOKENS_PER_THREAD);
        std::env::set_var(treepool::NUM_THREADS_ENV, "many");
        let err = treepool::ThreadPoolBuilder::new().build().unwrap_err();
        assert!(err.to_string().contains("TREEPOOL_NUM_THREADS"), "{err}");
        std::env::remove_var(treepool::NUM_THREADS_ENV);

        treepool::ThreadPoolBuilder::new()
            .num_threads(2)
            .max_inflight(5)
            .build_global()
            .expect("the first build_global");
        assert_eq!(treepool::current_num_threads(), 2);
        let (a, b) = treepool::join(|| 1, || 2);
        assert_eq!((a, b), (1, 2));
        let err = treepool::ThreadPoolBuilder::new()
            .build_global()
            .unwrap_err();
        assert!(err.to_string().contains("already"), "{err}");
    });
}
