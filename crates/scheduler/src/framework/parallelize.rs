//! Parallel work over nodes (upstream `framework/parallelize`): a pool of `parallelism` threads
//! (the configuration's `parallelism`, 16 by default upstream) and chunked loops. Loops of fewer
//! than [`MIN_PARALLEL`] items run on the calling thread: filtering or scoring a node takes about
//! 0.1 µs once its info is prefetched, so below that the hand-off to other threads (and their
//! cold caches) costs more than it saves — measured with `examples/cycles`: 500 nodes a cycle ran
//! 40% faster inline than on two threads.

use std::sync::Arc;

use rayon::prelude::*;

/// Below this many items the work runs inline.
pub const MIN_PARALLEL: usize = 1024;

#[derive(Clone)]
pub struct Parallelizer {
    pool: Option<Arc<rayon::ThreadPool>>,
    parallelism: usize,
}

impl Default for Parallelizer {
    fn default() -> Self {
        Parallelizer::new(1)
    }
}

impl Parallelizer {
    /// `parallelism` threads; 1 runs everything inline.
    pub fn new(parallelism: usize) -> Parallelizer {
        let parallelism = parallelism.max(1);
        let pool = (parallelism > 1)
            .then(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(parallelism)
                    .thread_name(|i| format!("sched-worker-{i}"))
                    .build()
                    .ok()
            })
            .flatten()
            .map(Arc::new);
        Parallelizer { pool, parallelism }
    }

    pub fn parallelism(&self) -> usize {
        self.parallelism
    }

    /// Upstream `chunkSizeFor`: about sqrt(n), at least 1, so work is spread but not too finely.
    fn chunk_size(&self, n: usize) -> usize {
        let s = (n as f64).sqrt() as usize + 1;
        s.clamp(1, (n / self.parallelism).max(1))
    }

    /// `f(i)` for every i in 0..n, results in order.
    pub fn map<T, F>(&self, n: usize, f: F) -> Vec<T>
    where
        T: Send,
        F: Fn(usize) -> T + Sync + Send,
    {
        match &self.pool {
            Some(pool) if n >= MIN_PARALLEL => {
                let chunk = self.chunk_size(n);
                pool.install(|| (0..n).into_par_iter().with_min_len(chunk).map(&f).collect())
            }
            _ => (0..n).map(f).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_map_keeps_order() {
        for p in [1, 2, 4] {
            let par = Parallelizer::new(p);
            let out = par.map(5000, |i| i * 2);
            assert_eq!(out, (0..5000).map(|i| i * 2).collect::<Vec<_>>());
            assert_eq!(par.map(3, |i| i), vec![0, 1, 2]);
        }
    }
}
