//! Unit tests of the parent module.

use super::*;
use crate::config::error::Issues;
use serde_json::json;

fn cluster(share_bans: bool) -> Arc<Cluster> {
    let v = json!({ "redis": { "url": "redis://127.0.0.1:1" }, "nodeId": "a",
                    "shareBans": share_bans });
    let mut issues = Issues::default();
    let cfg = crate::config::cluster::parse_cluster(&v, "cluster", &mut issues).unwrap();
    Cluster::new(cfg).unwrap()
}

fn queued(c: &Cluster) -> Vec<(BanKind, String, Option<u16>, Option<u64>)> {
    let mut rx = c.out_rx.try_lock().unwrap();
    let mut out = Vec::new();
    while let Ok(o) = rx.try_recv() {
        if let Outgoing::Ban {
            kind,
            net,
            port,
            deadline_ns,
            ..
        } = o
        {
            out.push((kind, net.to_string(), port, deadline_ns));
        }
    }
    out
}

fn kb(net: &str, deadline_ns: u64, syn: bool, prefix: bool) -> KernelBan {
    KernelBan {
        net: net.parse().unwrap(),
        port: 8443,
        deadline_ns,
        syn,
        prefix,
    }
}

#[test]
fn kernel_bans_are_queued_for_publishing_and_written_ones_are_not() {
    const S: u64 = crate::clock::NS_PER_SEC;
    let c = cluster(true);
    // A box received from another node reached the kernel from userspace.
    c.kernel_written("192.0.2.1/32".parse().unwrap(), 8443, 30 * S);
    let kernel = vec![
        kb("192.0.2.1/32", 30 * S, false, false),
        kb("198.51.100.7/32", 12 * S, true, false),
        kb("203.0.113.0/24", 40 * S, false, true),
    ];
    // Counters unchanged: the maps are not read.
    assert_eq!(c.kernel_scan(0, 0, S, || unreachable!()), 0);
    assert_eq!(c.kernel_scan(1, 0, S, || kernel.clone()), 2);
    assert_eq!(
        queued(&c),
        vec![
            (
                BanKind::Syn,
                "198.51.100.7/32".into(),
                Some(8443),
                Some(12 * S)
            ),
            (
                BanKind::Prefix,
                "203.0.113.0/24".into(),
                Some(8443),
                Some(40 * S)
            ),
        ]
    );
    assert_eq!(c.kernel_scan(2, 0, S, || kernel.clone()), 0, "no repeat");
    assert!(queued(&c).is_empty());
    // Without shareBans nothing is read or queued.
    let quiet = cluster(false);
    assert_eq!(quiet.kernel_scan(1, 1, S, || unreachable!()), 0);
}

/// Records what the cluster tier asks of the proxy.
#[derive(Default)]
struct Calls(Mutex<Vec<String>>);

impl Node for Calls {
    fn serves(&self, port: u16) -> bool {
        port == 8443
    }
    fn apply_box(&self, ip: IpAddr, port: Option<u16>, remaining_ns: u64, _: u64, _: &Arc<str>) {
        let muted = REMOTE.with(Cell::get);
        lock(&self.0).push(format!("box {ip} {port:?} {remaining_ns} muted={muted}"));
    }
    fn apply_prefix_box(
        &self,
        net: IpNet,
        port: Option<u16>,
        remaining_ns: u64,
        _: u64,
        _: &Arc<str>,
    ) {
        let muted = REMOTE.with(Cell::get);
        lock(&self.0).push(format!(
            "prefix {net} {port:?} {remaining_ns} muted={muted}"
        ));
    }
    fn apply_block(&self, net: IpNet, _: Option<u16>, _: Option<u64>, _: Option<String>, _: u64) {
        lock(&self.0).push(format!("block {net}"));
    }
    fn apply_unblock(&self, net: IpNet, _: Option<u16>) {
        lock(&self.0).push(format!("unblock {net}"));
    }
    fn unavailable(&self, _: String) {}
    fn rejected(&self, message: String) {
        lock(&self.0).push(format!("rejected {message}"));
    }
    fn apply_blocks(&self, blocks: Vec<BlockRequest>, _: u64) {
        for b in blocks {
            lock(&self.0).push(format!("block {}", b.net));
        }
    }
    fn update_lease(&self, _: ListenerId, _: IpKey, _: LeaseUpdate) -> u64 {
        0
    }
    fn lease_clients(&self) -> u64 {
        0
    }
}

#[test]
fn received_syn_and_prefix_bans_are_boxes_with_their_origin() {
    let c = cluster(true);
    let calls = Arc::new(Calls::default());
    let _ = c.node.set(calls.clone());
    let msg = |kind, net: &str| BanMessage {
        op: Op::Ban,
        node: "b".into(),
        kind,
        net: net.parse().unwrap(),
        port: Some(8443),
        ttl_ms: Some(5000),
        note: None,
        sent_us: 0,
    };
    for m in [
        msg(BanKind::Syn, "198.51.100.7/32"),
        msg(BanKind::Prefix, "203.0.113.0/24"),
    ] {
        c.apply(&m, m.ttl_ms, Arc::from("b"), None);
    }
    assert_eq!(
        *lock(&calls.0),
        [
            "box 198.51.100.7 Some(8443) 5000000000 muted=true",
            "prefix 203.0.113.0/24 Some(8443) 5000000000 muted=true",
        ]
    );
    assert!(!REMOTE.with(Cell::get), "unmuted after");
    assert_eq!(
        c.origin(BlockReason::PenaltyBoxed, "198.51.100.7", 8443),
        ("b".to_string(), Some(BanKind::Syn))
    );
    assert_eq!(
        c.origin(BlockReason::PenaltyBoxed, "203.0.113.0/24", 8443),
        ("b".to_string(), Some(BanKind::Prefix))
    );
    assert_eq!(
        c.origin(BlockReason::DynamicBlocked, "203.0.113.0/24", 8443),
        ("a".to_string(), None),
        "a received prefix box is not a blockIp entry"
    );
    // What the box listener reports while the remote ban is applied is not queued.
    c.boxed(
        8443,
        IpKey::new("198.51.100.7".parse().unwrap(), 64),
        1,
        false,
    );
    REMOTE.with(|r| r.set(true));
    c.boxed(
        8443,
        IpKey::new("198.51.100.8".parse().unwrap(), 64),
        1,
        false,
    );
    REMOTE.with(|r| r.set(false));
    assert_eq!(
        queued(&c),
        vec![(BanKind::Box, "198.51.100.7/32".into(), Some(8443), Some(1))]
    );
}

fn rejected(c: &Cluster) -> u64 {
    c.snapshot().rejected_messages
}

/// The ban channel: hostile messages are counted and change nothing, this node's own echo is
/// silent (once), a forgery or a replay in its name is rejected, a valid one applies; one
/// aggregated report.
#[test]
fn received_messages_are_checked_and_rejections_counted() {
    let c = cluster(true);
    let calls = Arc::new(Calls::default());
    let _ = c.node.set(calls.clone());
    let msg = |node: &str, kind: &str, net: &str| {
        format!(
            r#"{{"op":"ban","node":"{node}","kind":"{kind}","net":"{net}","port":8443,"ttlMs":5000,"sentUs":0}}"#
        )
    };
    c.receive(b"{");
    c.receive(msg("b", "prefix", "0.0.0.0/0").as_bytes());
    c.receive(msg("b", "block", "10.0.0.1/8").as_bytes());
    c.receive(&vec![b' '; MAX_MESSAGE_BYTES + 1]);
    assert_eq!(rejected(&c), 4);
    // This node's own message: silent when it published it (its echo), once.
    let own = msg("a", "block", "10.1.0.0/16");
    c.await_echo(own.as_bytes());
    c.receive(own.as_bytes());
    assert_eq!(rejected(&c), 4);
    c.receive(own.as_bytes());
    c.receive(msg("a", "block", "10.2.0.0/16").as_bytes());
    assert_eq!(rejected(&c), 6);
    assert!(lock(&calls.0).is_empty(), "nothing applied");
    assert_eq!(c.snapshot().bans_received, 0);
    c.receive(msg("b", "block", "10.3.0.0/16").as_bytes());
    assert_eq!(*lock(&calls.0), ["block 10.3.0.0/16"]);
    assert_eq!(
        c.origin(BlockReason::DynamicBlocked, "10.3.0.0/16", 8443).0,
        "b"
    );
    c.report_rejects();
    c.report_rejects();
    let calls = lock(&calls.0);
    assert_eq!(calls.len(), 2, "one report: {calls:?}");
    assert!(
        calls[1].starts_with(
            "rejected 6 ban message(s) from Redis rejected (metrics().cluster.rejectedMessages); \
             the first: ban channel: not a ban message: EOF"
        ),
        "{}",
        calls[1]
    );
}

/// A load's ban keys: each must hold a valid ban written under its own name; this node's own
/// keys are skipped silently, blocks are gathered for one write, the TTL is the key's PTTL.
#[test]
fn loaded_ban_keys_are_checked_against_their_names() {
    use redis::Value as V;
    let c = cluster(true);
    let calls = Arc::new(Calls::default());
    let _ = c.node.set(calls.clone());
    let mut blocks = Vec::new();
    let mut names = HashMap::new();
    let val = |node: &str, op: &str, net: &str| {
        V::BulkString(
            format!(
                r#"{{"op":"{op}","node":"{node}","kind":"block","net":"{net}","port":null,"ttlMs":60000,"sentUs":0}}"#
            )
            .into_bytes(),
        )
    };
    let key = |net: &str| format!("rampart:{{bans}}:block:*:{net}").into_bytes();
    let mut load =
        |k: Vec<u8>, v: V, pttl: i64| c.load_one(&k, &v, &V::Int(pttl), &mut blocks, &mut names);
    load(key("10.0.0.0/8"), val("b", "ban", "10.1.0.0/16"), 5000); // another key's ban
    load(key("10.0.0.0/8"), val("b", "unban", "10.0.0.0/8"), 5000);
    load(key("10.0.0.0/8"), V::Array(vec![]), 5000); // not a string
    load(
        key("10.0.0.0/8"),
        V::BulkString(vec![b'{'; MAX_MESSAGE_BYTES + 1]),
        5000,
    );
    load(key("10.0.0.0/8"), val("b", "ban", "10.0.0.0/8"), -2); // gone: not a rejection
    load(key("10.0.0.0/8"), val("a", "ban", "10.0.0.0/8"), 5000); // our own
    assert_eq!(rejected(&c), 4);
    load(key("10.0.0.0/8"), val("b", "ban", "10.0.0.0/8"), 1234);
    load(key("10.9.0.0/16"), val("b", "ban", "10.9.0.0/16"), 77);
    assert_eq!(rejected(&c), 4);
    let got: Vec<(String, Option<u64>)> = blocks
        .iter()
        .map(|b| (b.net.to_string(), b.ttl_ms))
        .collect();
    assert_eq!(
        got,
        [
            ("10.0.0.0/8".to_string(), Some(1234)),
            ("10.9.0.0/16".to_string(), Some(77))
        ]
    );
    assert_eq!(names.len(), 1, "the origin's name is shared");
    assert!(
        lock(&calls.0).is_empty(),
        "gathered, not applied one by one"
    );
    c.flush_blocks(&mut blocks);
    assert!(blocks.is_empty());
    assert_eq!(*lock(&calls.0), ["block 10.0.0.0/8", "block 10.9.0.0/16"]);
    assert_eq!(c.snapshot().bans_received, 2);
}
