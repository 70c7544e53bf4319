//! One [`Capacity`] per route name, kept across `updateConfig` (like the route counters): a
//! reload keeps the learned limit, the latency baseline and the counters of every route whose
//! name survives, and applies its new `concurrency` block.

use super::run_queue::RunQueueDelay;
use super::Capacity;
use crate::config::proxy::CapacityConfig;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The capacities of every route by name, and the proxy's `overload.eventLoopDelayMs`.
#[derive(Debug, Default)]
pub struct CapacityRegistry {
    routes: Mutex<HashMap<String, Arc<Capacity>>>,
    /// `overload.eventLoopDelayMs` (`None`: the signal is ignored).
    delay_threshold_ms: Option<f64>,
    /// The proxy's run-queue delay, measured by the server's probe, read by every limiter.
    run_queue: Arc<RunQueueDelay>,
}

impl CapacityRegistry {
    /// A registry whose capacities count an event-loop delay above `delay_threshold_ms` as
    /// overload.
    pub(crate) fn new(delay_threshold_ms: Option<f64>) -> CapacityRegistry {
        CapacityRegistry {
            routes: Mutex::default(),
            delay_threshold_ms,
            run_queue: Arc::default(),
        }
    }

    /// The capacity of route `name` with `cfg` applied (created the first time). Called when a
    /// route table is built, never per connection.
    pub(crate) fn get(&self, name: &str, cfg: CapacityConfig) -> Arc<Capacity> {
        let mut m = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let c = m
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Capacity::with_run_queue(cfg, self.run_queue.clone())))
            .clone();
        c.set_config(cfg);
        c.set_delay_threshold(self.delay_threshold_ms);
        c
    }

    /// The run-queue delay every route's limiter reads (the server's probe records into it).
    pub(crate) fn run_queue(&self) -> &Arc<RunQueueDelay> {
        &self.run_queue
    }

    /// Forgets every route not in `keep` (a route removed by `updateConfig`), and tells the
    /// run-queue probes whether any route left is adaptive.
    pub(crate) fn retain(&self, keep: &[Arc<Capacity>]) {
        let mut m = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, v| {
            let kept = keep.iter().any(|k| Arc::ptr_eq(k, v));
            if !kept {
                // Its requests still waiting get their 503 now (nothing ticks it any more).
                v.close_queue();
            }
            kept
        });
        // The probes measure the run-queue delay only for an adaptive limiter to read.
        self.run_queue
            .set_wanted(m.values().any(|c| c.is_adaptive()));
    }

    /// Closes every route's queue and releases its parked permits (the proxy is going away).
    fn close_all(&self) {
        let m = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        for c in m.values() {
            c.close_queue();
        }
    }

    /// Feeds the embedding process's event-loop delay (ms, measured at `now_ns`) to every route.
    pub(crate) fn set_external_delay(&self, delay_ms: f64, now_ns: u64) {
        let m = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        for c in m.values() {
            c.set_external_delay(delay_ms, now_ns);
        }
    }
}

impl Drop for CapacityRegistry {
    fn drop(&mut self) {
        // Requests still waiting get their refusal now: nothing will wake them any more.
        self.close_all();
    }
}
