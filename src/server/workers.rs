//! The connection workers: one thread per `workerThreads`, each running its own current-thread
//! tokio runtime (its own epoll and timers) that owns one SO_REUSEPORT socket of every listener
//! and every connection accepted on it, for the connection's whole life.
//!
//! The kernel spreads new connections over the sockets of a listener (SO_REUSEPORT hashes the
//! 4-tuple), so the workers share nothing on the per-request path: no work stealing, no wake-up
//! of another worker, no task moving between CPUs — the model of nginx's worker processes and
//! HAProxy's threads with their own listeners. The background work (capacity ticks, kernel
//! sync, the cluster tier) stays on the proxy's own small runtime ([`super::Proxy`]).

use crate::capacity::run_queue::{RunQueueDelay, PROBE_INTERVAL_NS};
use crate::clock;
use crate::config::proxy::ListenerId;
use crate::listener::accept_loop;
use crate::shared::Shared;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What every worker's accept loops and connections are tied to (the proxy's `Running`).
pub(super) struct Lifetimes {
    /// Stops the accept loops.
    pub accept_stop: CancellationToken,
    /// The accept loops (awaited by `stop`).
    pub accept_tasks: TaskTracker,
    /// Cancels the connections still open at the end of a drain.
    pub conn_cancel: CancellationToken,
    /// The connections (awaited by `stop`).
    pub conns: TaskTracker,
    /// Stops the run-queue probes.
    pub background: CancellationToken,
}

/// The running worker threads.
pub(super) struct Workers {
    /// Ends every worker's runtime (after the connections are done, or at the proxy's drop).
    done: CancellationToken,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Starts one worker per entry of `sockets` (each: the listener sockets that worker owns).
    /// Errors: building a runtime, registering a socket with it or starting a thread (nothing
    /// keeps running then: the workers already started end with the returned value's drop).
    pub(super) fn start(
        shared: &Arc<Shared>,
        sockets: Vec<Vec<(ListenerId, std::net::TcpListener)>>,
        life: &Lifetimes,
    ) -> std::io::Result<Workers> {
        let mut workers = Workers {
            done: CancellationToken::new(),
            threads: Vec::with_capacity(sockets.len()),
        };
        for (i, socks) in sockets.into_iter().enumerate() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let listeners = {
                let _in_rt = rt.enter();
                socks
                    .into_iter()
                    .map(|(li, s)| Ok((li, tokio::net::TcpListener::from_std(s)?)))
                    .collect::<std::io::Result<Vec<_>>>()?
            };
            // Spawned on the worker's runtime before its thread runs, so that `stop()` counts
            // them from the start: its wait for the accept loops then covers a worker that has
            // not run yet, and the sockets are closed when it returns.
            for (li, t) in listeners {
                life.accept_tasks.spawn_on(
                    accept_loop(
                        shared.clone(),
                        li,
                        t,
                        life.accept_stop.clone(),
                        life.conns.clone(),
                        life.conn_cancel.clone(),
                    ),
                    rt.handle(),
                );
            }
            let delay = shared.capacities.run_queue().clone();
            rt.spawn(run_queue_probe(delay, life.background.clone()));
            let done = workers.done.clone();
            let thread = std::thread::Builder::new()
                .name(format!("rampart-w{i}"))
                .spawn(move || rt.block_on(done.cancelled()));
            workers.threads.push(thread?);
        }
        Ok(workers)
    }

    /// Ends every worker's runtime (tasks still on it are dropped) and waits for the threads.
    pub(super) fn end(&mut self) {
        self.done.cancel();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Workers {
    /// Ends every worker's runtime without waiting (the proxy's drop, or a failed start).
    fn drop(&mut self) {
        self.done.cancel();
    }
}

/// Measures this worker's run-queue delay every `PROBE_INTERVAL_NS` for the limiters
/// (`capacity::run_queue`): yields once and records how long until it runs again. Sleeps while
/// no route's limiter is adaptive (nothing reads the delay then).
async fn run_queue_probe(delay: Arc<RunQueueDelay>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_nanos(PROBE_INTERVAL_NS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if !delay.wanted() {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = delay.until_wanted() => tick.reset(),
            }
            continue;
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let start = clock::now_ns();
        tokio::task::yield_now().await;
        delay.record(clock::now_ns().saturating_sub(start));
    }
}
