//! The client streams of one connection that are open at once, bounded.
//!
//! A client stream is open (RFC 9113 §5.1: "open" or either "half-closed" state, the states that
//! count toward SETTINGS_MAX_CONCURRENT_STREAMS, §5.1.2) from its first HEADERS until both sides
//! sent END_STREAM, or until a RST_STREAM in either direction. The guard refuses the stream that
//! would make the set exceed `maxConcurrentStreams` (a violation ends the connection), so the set
//! never holds more than that many entries: no slack is needed.
//!
//! Each entry also says whether the stream was answered (the upstream's first HEADERS on it
//! passed), so that [`StreamHooks::closed`](super::StreamHooks::closed) is told exactly once per
//! stream: at the answer, or when the stream leaves the set unanswered (the `bool` the closing
//! methods return).
//!
//! Memory: one 8-byte entry (stream id, three flags) per open stream, in one buffer reserved at
//! construction for `min(cap, PREALLOCATED)` entries — all of them for the default cap of 100, so
//! the hot path never allocates. A larger configured cap grows the buffer only when the open count
//! reaches a new high-water mark (amortised doubling, never past `cap`), never per frame.
//!
//! Cost: new streams have increasing ids (RFC 9113 §5.1.1), so appending keeps the buffer sorted;
//! a lookup is a binary search (≤ 7 probes at 100 streams), a close is that plus a `memmove` of
//! the entries after it (≤ 800 bytes at 100 streams).

/// Entries reserved up front; the default `maxConcurrentStreams` (100) fits.
const PREALLOCATED: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    id: u32,
    client_ended: bool,
    server_ended: bool,
    answered: bool,
}

/// Open client streams, sorted by id, at most `cap`.
#[derive(Debug)]
pub(crate) struct OpenStreams {
    entries: Vec<Entry>,
    cap: usize,
}

impl OpenStreams {
    pub(super) fn new(cap: u32) -> OpenStreams {
        let cap = cap as usize;
        OpenStreams {
            entries: Vec::with_capacity(cap.min(PREALLOCATED)),
            cap,
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether another stream would exceed the cap.
    #[inline]
    pub(super) fn is_full(&self) -> bool {
        self.entries.len() >= self.cap
    }

    /// Opens `id`, which must be greater than every id opened before, in a set that is not full.
    /// `client_ended`: the opening HEADERS carried END_STREAM.
    pub(super) fn open(&mut self, id: u32, client_ended: bool) {
        debug_assert!(!self.is_full());
        debug_assert!(self.entries.last().is_none_or(|e| e.id < id));
        self.entries.push(Entry {
            id,
            client_ended,
            server_ended: false,
            answered: false,
        });
    }

    /// The client sent END_STREAM on `id`; closes it if the server had too. True when that
    /// closed a stream that was never answered.
    pub(super) fn end_client(&mut self, id: u32) -> bool {
        if let Ok(i) = self.find(id) {
            if self.entries[i].server_ended {
                return !self.entries.remove(i).answered;
            }
            self.entries[i].client_ended = true;
        }
        false
    }

    /// The server sent END_STREAM on `id`; closes it if the client had too. True when that
    /// closed a stream that was never answered.
    pub(super) fn end_server(&mut self, id: u32) -> bool {
        if let Ok(i) = self.find(id) {
            if self.entries[i].client_ended {
                return !self.entries.remove(i).answered;
            }
            self.entries[i].server_ended = true;
        }
        false
    }

    /// The upstream's HEADERS on `id` passed: true the first time for an open stream (its
    /// answer), false after that or for a stream that is not open.
    pub(super) fn answer(&mut self, id: u32) -> bool {
        match self.find(id) {
            Ok(i) if !self.entries[i].answered => {
                self.entries[i].answered = true;
                true
            }
            _ => false,
        }
    }

    /// Empties the set (the connection ended), calling `f` with each stream that was never
    /// answered, in id order. Keeps the buffer.
    pub(super) fn drain_unanswered(&mut self, mut f: impl FnMut(u32)) {
        for e in self.entries.drain(..) {
            if !e.answered {
                f(e.id);
            }
        }
    }

    /// Whether an open, unanswered stream still waits for client bytes (no END_STREAM from the
    /// client yet): holding the client's next frame could stall it. A scan (≤ the cap).
    pub(super) fn awaiting_client(&self) -> bool {
        self.entries.iter().any(|e| !e.client_ended && !e.answered)
    }

    /// Whether `id` is open.
    #[inline]
    pub(super) fn is_open(&self, id: u32) -> bool {
        self.find(id).is_ok()
    }

    /// A RST_STREAM on `id` (either direction) closes it. True when it was open and never
    /// answered.
    pub(super) fn reset(&mut self, id: u32) -> bool {
        match self.find(id) {
            Ok(i) => !self.entries.remove(i).answered,
            Err(_) => false,
        }
    }

    #[inline]
    fn find(&self, id: u32) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&id, |e| e.id)
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.entries.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closes_when_both_sides_ended_or_reset() {
        let mut s = OpenStreams::new(100);
        s.open(1, true);
        s.open(3, false);
        s.open(5, false);
        assert_eq!(s.len(), 3);
        s.end_server(1);
        assert_eq!(s.len(), 2, "client and server ended stream 1");
        s.end_server(3);
        assert_eq!(s.len(), 2, "stream 3 is half-closed, still counted");
        s.end_client(3);
        assert_eq!(s.len(), 1);
        s.reset(5);
        assert_eq!(s.len(), 0);
        // Unknown ids are ignored.
        s.reset(7);
        s.end_client(9);
        s.end_server(11);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn each_stream_is_answered_or_closed_unanswered_once() {
        let mut s = OpenStreams::new(10);
        for id in [1, 3, 5, 7] {
            s.open(id, true);
        }
        assert!(s.answer(1));
        assert!(!s.answer(1), "a second HEADERS (trailers) is not an answer");
        assert!(!s.end_server(1), "answered, then closed");
        assert!(s.end_server(3), "ended by both sides without HEADERS first");
        assert!(s.answer(5));
        assert!(!s.reset(5), "reset after its answer");
        assert!(!s.reset(5) && !s.answer(9), "not open");
        s.open(9, false);
        assert!(s.answer(9));
        let mut left = vec![];
        s.drain_unanswered(|id| left.push(id));
        assert_eq!((left, s.len()), (vec![7], 0));
    }

    #[test]
    fn full_at_cap_and_default_cap_never_allocates() {
        let mut s = OpenStreams::new(100);
        let cap = s.capacity();
        assert!(cap >= 100);
        for round in 0..3u32 {
            for k in 0..100u32 {
                assert!(!s.is_full());
                s.open(1 + 2 * (round * 100 + k), false);
            }
            assert!(s.is_full());
            for k in (0..100u32).rev() {
                s.reset(1 + 2 * (round * 100 + k));
            }
        }
        assert_eq!(s.capacity(), cap);
    }

    #[test]
    fn out_of_order_closes_keep_the_set_sorted() {
        let mut s = OpenStreams::new(10);
        for id in [1, 3, 5, 7, 9] {
            s.open(id, false);
        }
        s.reset(5);
        s.reset(1);
        s.open(11, false);
        assert_eq!(
            s.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
            [3, 7, 9, 11]
        );
        s.end_client(9);
        s.end_server(9);
        assert_eq!(s.len(), 3);
        assert!(s.find(9).is_err() && s.find(11).is_ok());
    }
}
