//! Unit tests of the request follower's hooks and per-request limits.

use super::super::Tunnels;
use super::*;
use std::sync::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

/// Hooks that log each call and refuse the request numbered `refuse` (1-based) with `answer`.
struct Log {
    log: Arc<Mutex<Vec<&'static str>>>,
    seen: u32,
    refuse: u32,
}

impl RequestHooks for Log {
    fn request(&mut self, _: u64) -> Result<(), Answer> {
        self.seen += 1;
        if self.seen == self.refuse {
            self.log.lock().unwrap().push("refused");
            return Err(Answer {
                bytes: b"HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\n\r\n".to_vec(),
                reason: AnswerReason::RequestRateLimited,
            });
        }
        self.log.lock().unwrap().push("request");
        Ok(())
    }
    fn responded(&mut self, _: u64) {
        self.log.lock().unwrap().push("responded");
    }
}

type Writer = HeaderWriter<DuplexStream, Log>;

/// A follower (nothing rewritten) with logging hooks refusing request `refuse` (0: none) and
/// `limits`; the upstream's end and the log.
fn writer(
    refuse: u32,
    limits: ConnLimits,
) -> (Writer, DuplexStream, Arc<Mutex<Vec<&'static str>>>) {
    let (a, b) = tokio::io::duplex(4096);
    let log = Arc::<Mutex<Vec<&'static str>>>::default();
    let hooks = Log {
        log: log.clone(),
        seen: 0,
        refuse,
    };
    let w = HeaderWriter::with_hooks(a, Rewriter::follow(Tunnels::default()), hooks, limits);
    (w, b, log)
}

/// Everything the client reads until the end of the stream.
async fn read_all(w: &mut Writer) -> io::Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match w.read(&mut buf).await? {
            0 => return Ok(got),
            n => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads from the upstream's end exactly `want.len()` bytes and compares them.
async fn upstream_got(b: &mut DuplexStream, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    b.read_exact(&mut got).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

#[tokio::test]
async fn pipelined_requests_each_get_request_and_responded_in_order() {
    let (mut w, mut b, log) = writer(0, ConnLimits::default());
    let reqs = b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nHEAD /3 HTTP/1.1\r\n\r\n";
    w.write_all(reqs).await.unwrap();
    upstream_got(&mut b, reqs).await;
    assert_eq!(*log.lock().unwrap(), ["request"; 3]);
    // Responses in one read, the last one's head split.
    b.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let _ = w.read(&mut buf).await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["request", "request", "request", "responded", "responded"]
    );
    b.write_all(b" OK\r\nContent-Length: 9\r\n\r\n")
        .await
        .unwrap();
    let _ = w.read(&mut buf).await.unwrap();
    assert_eq!(log.lock().unwrap().len(), 6);
    assert_eq!(log.lock().unwrap()[5], "responded");
    assert_eq!(w.ended(), None);
}

#[tokio::test]
async fn interim_100_continue_is_not_a_response_and_101_is() {
    let (mut w, mut b, log) = writer(0, ConnLimits::default());
    let post = b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    w.write_all(post).await.unwrap();
    upstream_got(&mut b, post).await;
    b.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 256];
    let _ = w.read(&mut buf).await.unwrap();
    assert_eq!(*log.lock().unwrap(), ["request"]);
    w.write_all(b"hi").await.unwrap();
    b.write_all(OK).await.unwrap();
    let _ = w.read(&mut buf).await.unwrap();
    assert_eq!(*log.lock().unwrap(), ["request", "responded"]);
    // An upgrade's 101 is its final answer.
    let ws = b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    w.write_all(ws).await.unwrap();
    b.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
        .await
        .unwrap();
    let _ = w.read(&mut buf).await.unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        ["request", "responded", "request", "responded"]
    );
}

#[tokio::test]
async fn an_answer_goes_after_the_earlier_responses_and_nothing_of_its_request_is_forwarded() {
    let (mut w, mut b, log) = writer(2, ConnLimits::default());
    let first = b"GET /1 HTTP/1.1\r\n\r\n";
    let mut both = first.to_vec();
    both.extend_from_slice(b"POST /2 HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody");
    w.write_all(&both).await.unwrap();
    // What the client sends after it is dropped.
    w.write_all(b"GET /3 HTTP/1.1\r\n\r\n").await.unwrap();
    assert_eq!(
        w.ended(),
        Some(Ended::Answered(AnswerReason::RequestRateLimited))
    );
    assert!(w.refused_flag().load(Ordering::Relaxed));
    assert_eq!(w.refused(), None);
    // The first response, split, then the answer, then the end.
    b.write_all(&OK[..10]).await.unwrap();
    let reader = async {
        let got = read_all(&mut w).await.unwrap();
        let mut want = OK.to_vec();
        want.extend_from_slice(b"HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\n\r\n");
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want)
        );
    };
    let upstream = async {
        b.write_all(&OK[10..]).await.unwrap();
    };
    tokio::join!(reader, upstream);
    assert_eq!(*log.lock().unwrap(), ["request", "refused", "responded"]);
    w.shutdown().await.unwrap();
    let mut up = Vec::new();
    b.read_to_end(&mut up).await.unwrap();
    assert_eq!(up, first);
}

#[tokio::test]
async fn a_slow_keep_alive_head_ends_the_pair_at_its_deadline() {
    let limits = ConnLimits {
        head_timeout: Some(Duration::from_millis(100)),
        ..ConnLimits::default()
    };
    let (mut w, mut b, _) = writer(0, limits);
    // A head in one write arms nothing; its response passes.
    w.write_all(b"GET /1 HTTP/1.1\r\n\r\n").await.unwrap();
    b.write_all(OK).await.unwrap();
    let mut buf = [0u8; 256];
    assert_eq!(w.read(&mut buf).await.unwrap(), OK.len());
    // Long after it, the next head starts and stalls.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let start = Instant::now();
    w.write_all(b"GET /2 HTTP/1.1\r\nHo").await.unwrap();
    let e = w.read(&mut buf).await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert!(start.elapsed() >= Duration::from_millis(100));
    assert_eq!(w.ended(), Some(Ended::SlowRequest));
    // Observe mode: recorded, and the request goes on.
    let (mut w, mut b, _) = writer(
        0,
        ConnLimits {
            observe: true,
            ..limits
        },
    );
    w.write_all(b"GET /2 HTTP/1.1\r\nHo").await.unwrap();
    let slow = tokio::time::timeout(Duration::from_millis(200), w.read(&mut buf)).await;
    assert!(slow.is_err(), "nothing to read, no error");
    assert!(w.observed());
    w.write_all(b"st: x\r\n\r\n").await.unwrap();
    upstream_got(&mut b, b"GET /2 HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(w.ended(), None);
}

#[tokio::test]
async fn the_keep_alive_gap_counts_only_while_no_response_is_outstanding() {
    let limits = ConnLimits {
        keep_alive_timeout: Some(Duration::from_millis(100)),
        ..ConnLimits::default()
    };
    let (mut w, mut b, _) = writer(0, limits);
    w.write_all(b"GET /1 HTTP/1.1\r\n\r\n").await.unwrap();
    // A slow response: no gap runs while it is outstanding.
    tokio::time::sleep(Duration::from_millis(150)).await;
    b.write_all(OK).await.unwrap();
    let mut buf = [0u8; 256];
    assert_eq!(w.read(&mut buf).await.unwrap(), OK.len());
    // Then the gap: the client's side ends (a normal close).
    let start = Instant::now();
    assert_eq!(w.read(&mut buf).await.unwrap(), 0);
    assert!(start.elapsed() >= Duration::from_millis(100));
    assert_eq!(w.ended(), Some(Ended::Idle));
    // A request after it is dropped.
    w.write_all(b"GET /2 HTTP/1.1\r\n\r\n").await.unwrap();
    w.shutdown().await.unwrap();
    upstream_got(&mut b, b"GET /1 HTTP/1.1\r\n\r\n").await;
    let mut rest = Vec::new();
    b.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
}

#[tokio::test]
async fn the_last_request_gets_connection_close_and_a_further_one_ends_the_connection() {
    let limits = ConnLimits {
        max_requests: 2,
        ..ConnLimits::default()
    };
    let (mut w, mut b, log) = writer(0, limits);
    w.write_all(b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\nConnection: keep-alive\r\n\r\nGET /3 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(w.ended(), Some(Ended::MaxRequests));
    w.shutdown().await.unwrap();
    let mut up = Vec::new();
    b.read_to_end(&mut up).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&up),
        "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"
    );
    // Both responses pass, then the end.
    let mut two = OK.to_vec();
    two.extend_from_slice(OK);
    b.write_all(&two).await.unwrap();
    assert_eq!(read_all(&mut w).await.unwrap(), two);
    assert_eq!(
        *log.lock().unwrap(),
        ["request", "request", "responded", "responded"]
    );
    // With a cap of 1 the first request is the last.
    let (mut w, mut b, _) = writer(
        0,
        ConnLimits {
            max_requests: 1,
            ..limits
        },
    );
    w.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    upstream_got(&mut b, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n").await;
}
