//! The loom model runner shared by the models of this binary.

/// Runs `f` under loom, exploring the interleavings with at most `preemptions` preemptions
/// (`None`: all of them; the two-thread models are small enough). Prints how many it explored.
pub fn model<F>(preemptions: Option<usize>, f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    // `TREEPOOL_LOOM_PREEMPTIONS` overrides every model's bound (e.g. 2 for the slower run
    // under AddressSanitizer).
    let preemptions = std::env::var("TREEPOOL_LOOM_PREEMPTIONS")
        .ok()
        .map(|v| v.parse().unwrap())
        .or(preemptions);
    builder.preemption_bound = preemptions;
    // Counts the executions explored (shown with `--nocapture`); std's atomic, outside the model.
    let executions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = executions.clone();
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Every lender made in the execution is freed by its end (loom's own leak check sees
        // its `Arc`s only; lenders count their references themselves).
        let before = treepool::__loom::live_lenders();
        f();
        let after = treepool::__loom::live_lenders();
        assert_eq!(
            after, before,
            "a lender leaked: a reference was never given back"
        );
    });
    let executions = executions.load(std::sync::atomic::Ordering::Relaxed);
    println!("{executions} executions, preemption bound {preemptions:?}");
}
