//! [`H2Guard`]: both inspectors and the state they share, for a copy loop that pumps both
//! directions in one task (see the module doc of [`crate::http2`] for what is counted and why).
//!
//! Each inspector is a byte-at-a-time state machine over one direction of the decrypted stream:
//! it holds at most one partial 9-byte frame header and a few counters, skips payloads by length,
//! and tells the copy loop, per chunk, how much of the chunk may be forwarded ([`Inspect`]). Both
//! update one [`ConnState`] that they receive by `&mut`, so the caller decides how it is shared:
//! owned next to both inspectors in one task ([`H2Guard`], no lock), or behind a `Mutex` locked
//! once per chunk when the two directions run in two tasks.
//!
//! Where things are: the limits and outcomes in `limits.rs`, the shared state and the frame
//! header reader in `conn_state.rs`, the two directions in `client.rs` and `upstream.rs`, the
//! GOAWAY in `goaway.rs`, the frame layout in `frame.rs`, stream bookkeeping in `streams.rs`,
//! Rampart's own SETTINGS in `preface.rs`.

use super::client::ClientToUpstream;
use super::conn_state::{ConnState, LazyNow};
use super::goaway::Goaway;
use super::hooks::{ClientBudget, StreamHooks};
use super::limits::{H2GuardConfig, Inspect};
use super::upstream::UpstreamToClient;
use crate::clock;

/// Both inspectors and their shared state, for a copy loop that pumps both directions in one
/// task (as `proxy::copy` does): no lock, each call borrows the whole guard for one chunk.
/// `hooks` hear of each client stream ([`StreamHooks`]), `budget` holds the client's budgets over
/// all its connections ([`ClientBudget`]); both are no-ops (`()`) by default.
///
/// Dropping the guard ends the connection for the hooks: every stream still open and unanswered
/// gets `closed(id, false, now)` (the clock is read then, only if one is left), unless
/// [`H2Guard::finish`] did it first.
#[derive(Debug)]
pub struct H2Guard<H: StreamHooks = (), B: ClientBudget = ()> {
    conn: ConnState,
    client: ClientToUpstream,
    upstream: UpstreamToClient,
    hooks: H,
    budget: B,
}

impl H2Guard {
    /// A guard for a new connection, without hooks nor client budget.
    pub fn new(config: &H2GuardConfig) -> H2Guard {
        H2Guard::with(config, (), ())
    }
}

impl<H: StreamHooks, B: ClientBudget> H2Guard<H, B> {
    /// A guard for a new connection that tells `hooks` of its streams and counts against the
    /// client's `budget` too.
    pub fn with(config: &H2GuardConfig, hooks: H, budget: B) -> H2Guard<H, B> {
        H2Guard {
            conn: ConnState::new(config),
            client: ClientToUpstream::new(),
            upstream: UpstreamToClient::new(),
            hooks,
            budget,
        }
    }

    /// [`ClientToUpstream::inspect`] on a chunk read from the client.
    #[inline]
    pub fn inspect_client(&mut self, chunk: &[u8], now_ns: u64) -> Inspect {
        self.client.inspect_at(
            &mut self.conn,
            chunk,
            &mut { now_ns },
            &mut self.hooks,
            &self.budget,
        )
    }

    /// [`UpstreamToClient::inspect`] on a chunk read from the upstream.
    #[inline]
    pub fn inspect_upstream(&mut self, chunk: &mut [u8], now_ns: u64) -> Inspect {
        self.upstream.inspect_at(
            &mut self.conn,
            chunk,
            &mut { now_ns },
            &mut self.hooks,
            &self.budget,
        )
    }

    /// [`H2Guard::inspect_client`] reading `clock` (CLOCK_MONOTONIC ns) at most once, and only
    /// when a decision needs the time.
    #[inline]
    pub fn inspect_client_clocked(&mut self, chunk: &[u8], clock: impl FnMut() -> u64) -> Inspect {
        self.client.inspect_at(
            &mut self.conn,
            chunk,
            &mut LazyNow::new(clock),
            &mut self.hooks,
            &self.budget,
        )
    }

    /// [`H2Guard::inspect_upstream`] reading `clock` at most once, and only when a decision
    /// needs the time (most upstream chunks need none).
    #[inline]
    pub fn inspect_upstream_clocked(
        &mut self,
        chunk: &mut [u8],
        clock: impl FnMut() -> u64,
    ) -> Inspect {
        self.upstream.inspect_at(
            &mut self.conn,
            chunk,
            &mut LazyNow::new(clock),
            &mut self.hooks,
            &self.budget,
        )
    }

    /// [`UpstreamToClient::goaway`].
    pub fn goaway(&self) -> Option<Goaway> {
        self.upstream.goaway(&self.conn)
    }

    /// [`UpstreamToClient::interjection`]: the graceful GOAWAY of `maxStreamsPerConnection`,
    /// once, when due and the upstream direction is between frames.
    pub fn interjection(&mut self) -> Option<Goaway> {
        self.upstream.interjection(&mut self.conn)
    }

    /// [`ConnState::finish`] with this guard's hooks: the connection ended at `now_ns`.
    pub fn finish(&mut self, now_ns: u64) {
        self.conn.finish(&mut self.hooks, now_ns);
    }

    /// The shared state (open streams, last stream id, why it ends).
    pub fn state(&self) -> &ConnState {
        &self.conn
    }

    /// The stream hooks.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// The stream hooks, mutably (to poll them while they hold a frame).
    pub fn hooks_mut(&mut self) -> &mut H {
        &mut self.hooks
    }

    /// The upstream → client inspector (frame boundary, server preface, SETTINGS seen).
    pub fn upstream(&self) -> &UpstreamToClient {
        &self.upstream
    }

    /// [`UpstreamToClient::server_preface_sent`]: the caller wrote Rampart's SETTINGS to the
    /// client before any upstream byte.
    pub fn server_preface_sent(&mut self) {
        self.upstream.server_preface_sent();
    }
}

impl<H: StreamHooks, B: ClientBudget> Drop for H2Guard<H, B> {
    fn drop(&mut self) {
        if self.conn.open_streams() > 0 {
            let now = if H::TIMED { clock::now_ns() } else { 0 };
            self.conn.finish(&mut self.hooks, now);
        }
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
