'use strict';
// CIDR lists, dynamic blocks, hot swaps, observe mode, post-hello checks, events.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const h = require('./helpers');

test('blocklist refuses with cidr_blocked; allowlist skips every check', async (t) => {
  const p = await h.protectedProxy({
    protection: { blocklist: ['127.0.0.2', '10.0.0.0/8'], allowlist: ['127.0.0.3/32'], rateLimit: { connectionsPerSecond: 1, burst: 1 } },
  });
  t.after(() => p.close());
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
  for (let i = 0; i < 4; i++) assert.equal(await h.admitted(p.port, '127.0.0.3'), true, `allowlisted attempt ${i + 1}`);
  await h.waitFor(() => p.events.length === 1, { what: 'blocked event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason], ['127.0.0.2', 'cidr_blocked']);
  assert.deepEqual(p.proxy.blockedIps().cidrBlocklist, ['10.0.0.0/8', '127.0.0.2/32']);
});

test('blockIp / unblockIp: dynamic blocks with TTL on every listener, with or without protection', async (t) => {
  const p = await h.protectedProxy({});
  t.after(() => p.close());
  p.proxy.blockIp('127.0.0.6', { ttlMs: 800, reason: 'waf feed' });
  p.proxy.blockIp('127.0.7.0/24');
  assert.equal(await h.admitted(p.port, '127.0.0.6'), false);
  assert.equal(await h.admitted(p.port, '127.0.7.9'), false);
  assert.equal(await h.admitted(p.port, '127.0.0.8'), true);
  await h.waitFor(() => p.events.length === 2, { what: 'two blocked events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason]),
    [
      ['127.0.0.6', 'dynamic_blocked'],
      ['127.0.7.9', 'dynamic_blocked'],
    ]
  );
  assert.deepEqual(p.proxy.blockedIps().dynamicBlocklist, ['127.0.0.6/32', '127.0.7.0/24']);
  const d = p.proxy.blockedIps({ detail: true }).dynamicBlocklist;
  assert.equal(d[0].ip, '127.0.0.6/32');
  assert.equal(d[0].reason, 'dynamic_blocked');
  assert.equal(d[0].note, 'waf feed');
  assert.ok(d[0].remainingMs > 0 && d[0].remainingMs <= 800);
  assert.equal(d[1].remainingMs, undefined);
  assert.equal(p.proxy.unblockIp('127.0.7.0/24'), true);
  assert.equal(p.proxy.unblockIp('127.0.7.0/24'), false);
  assert.equal(await h.admitted(p.port, '127.0.7.9'), true);
  await h.waitFor(() => p.proxy.blockedIps().dynamicBlocklist.length === 0, { what: 'TTL expiry', intervalMs: 50 });
  assert.equal(await h.admitted(p.port, '127.0.0.6'), true);
  // Bad input: clear errors, nothing changes.
  assert.throws(
    () => p.proxy.blockIp('10.1.2.3/8'),
    (e) => {
      assert.equal(e.errors[0].path, 'cidr');
      assert.match(e.errors[0].message, /did you mean 10\.0\.0\.0\/8\?/);
      return true;
    }
  );
  assert.throws(
    () => p.proxy.blockIp('127.0.0.9', { ttlMs: NaN, port: 1 }),
    (e) => {
      assert.deepEqual(
        e.errors.map((x) => x.path),
        ['opts.ttlMs', 'opts.port']
      );
      assert.equal(e.errors[0].message, 'must be an integer in [1, 2^53-1], got NaN');
      return true;
    }
  );
  assert.deepEqual(p.proxy.blockedIps().dynamicBlocklist, []);
});

test('dynamicBlocks() lists every blockIp entry exactly as held: canonical CIDR, port scope, remaining time, reason', async (t) => {
  const p = await h.protectedProxy({});
  t.after(() => p.close());
  const t0 = Date.now();
  p.proxy.blockIp('2001:db8:0:0::/48', { ttlMs: 600000, reason: 'INC-9' });
  p.proxy.blockIp('127.0.0.6', { port: p.port });
  p.proxy.blockIp('::ffff:198.51.100.0/120');
  const got = p.proxy.dynamicBlocks();
  const elapsed = Date.now() - t0;
  assert.deepEqual(
    got.map((b) => [b.cidr, b.port, b.reason]),
    [
      ['127.0.0.6/32', p.port, undefined],
      ['198.51.100.0/24', null, undefined],
      ['2001:db8::/48', null, 'INC-9'],
    ]
  );
  const timed = got[2].remainingMs;
  assert.ok(timed <= 600000 && timed >= 600000 - elapsed - 1, `${timed} after ${elapsed} ms`);
  assert.equal(got[0].remainingMs, undefined);
  assert.equal(
    got.every((b) => b.node === undefined),
    true
  );
  p.proxy.unblockIp('127.0.0.6', { port: p.port });
  assert.deepEqual(
    p.proxy.dynamicBlocks().map((b) => b.cidr),
    ['198.51.100.0/24', '2001:db8::/48']
  );
});

test('hot swap none → some → none on a running listener keeps open connections', async (t) => {
  const p = await h.protectedProxy({});
  t.after(() => p.close());
  const held = tls.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.2', servername: 'x', rejectUnauthorized: false });
  held.on('error', () => {});
  let got = '';
  held.on('data', (d) => (got += d));
  await new Promise((r) => held.once('secureConnect', r));
  p.proxy.updateConfig({ protection: [{ port: p.port, protection: { blocklist: ['127.0.0.2'] } }] });
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
  held.write('still-here');
  await h.waitFor(() => got === 'still-here', { what: 'the held connection to keep streaming' });
  p.proxy.updateConfig({ protection: [{ port: p.port, protection: null }] });
  assert.equal(await h.admitted(p.port, '127.0.0.2'), true);
  held.destroy();
});

test('a failed combined update changes nothing: routes nor protection', async (t) => {
  const other = await h.echoServer({ tag: 'Z' });
  const p = await h.protectedProxy({ protection: { blocklist: ['127.0.0.2'] } });
  t.after(async () => {
    await p.close();
    await h.closeServer(other);
  });
  assert.throws(
    () =>
      p.proxy.updateConfig({
        routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: other.address().port }] }],
        protection: [
          { port: p.port, protection: { rateLimit: { connectionsPerSecond: NaN }, penaltyBox: { durationMs: -1 }, maxConcurrentPerIp: 1.5 } },
          { port: 1, protection: {} },
        ],
      }),
    (e) => {
      assert.deepEqual(
        e.errors.map((x) => x.path),
        [
          'protection[0].protection.rateLimit.connectionsPerSecond',
          'protection[0].protection.penaltyBox.durationMs',
          'protection[0].protection.maxConcurrentPerIp',
          'protection[1].port',
        ]
      );
      return true;
    }
  );
  // Old route (plain echo, no tag) and old blocklist still in force.
  const r = await h.tlsRoundTrip({ port: p.port, localAddress: '127.0.0.3', servername: 'x', payload: Buffer.from('q') });
  assert.equal(r.data.toString(), 'q');
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
});

test('observe mode admits while reporting with observed: true', async (t) => {
  const p = await h.protectedProxy({ protection: { mode: 'observe', blocklist: ['127.0.0.2'], rateLimit: { connectionsPerSecond: 1, burst: 1 } } });
  t.after(() => p.close());
  assert.equal(await h.admitted(p.port, '127.0.0.2'), true);
  assert.equal(await h.admitted(p.port, '127.0.0.3'), true);
  assert.equal(await h.admitted(p.port, '127.0.0.3'), true);
  await h.waitFor(() => p.events.length === 2, { what: 'two observed events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason, e.observed]),
    [
      ['127.0.0.2', 'cidr_blocked', true],
      ['127.0.0.3', 'rate_limited', true],
    ]
  );
  assert.deepEqual(p.proxy.blockedIps().cidrBlocklist, ['127.0.0.2/32']);
  assert.equal(p.proxy.metrics().listeners[0].accepted, 3);
});

test('requireSni refuses a hello without server_name with no_sni', async (t) => {
  const p = await h.protectedProxy({ protection: { requireSni: true } });
  t.after(() => p.close());
  // node:tls sends no SNI when servername is an IP literal or ''
  assert.equal(await h.admitted(p.port, '127.0.0.2', { servername: '' }), false);
  assert.equal(await h.admitted(p.port, '127.0.0.2', { servername: 'named.test' }), true);
  await h.waitFor(() => p.events.length === 1, { what: 'no_sni event' });
  assert.equal(p.events[0].reason, 'no_sni');
  assert.match(p.events[0].ja4, /^t13i/);
});

test('handshake timeout and slow-handshake guards', async (t) => {
  const p = await h.protectedProxy({ protection: { tlsHandshakeTimeoutMs: 300, slowHandshake: { maxPendingPerIp: 1 } } });
  t.after(() => p.close());
  const idle = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.2' });
  idle.on('error', () => {});
  const closed = new Promise((r) => idle.once('close', r));
  await new Promise((r) => idle.once('connect', r));
  // A second pending handshake from the same IP is refused at once.
  const second = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.2' });
  second.on('error', () => {});
  await new Promise((r) => second.once('close', r));
  await closed;
  await h.waitFor(() => p.events.length === 2, { what: 'two events' });
  assert.deepEqual(
    p.events.map((e) => [e.ip, e.reason]),
    [
      ['127.0.0.2', 'slow_handshake'],
      ['127.0.0.2', 'handshake_timeout'],
    ]
  );
  await h.waitFor(() => p.proxy.metrics().activeConnections === 0, { what: 'gauges back at zero' });
});

test('minBytesPerSecond closes a trickling ClientHello as slow_handshake', async (t) => {
  const p = await h.protectedProxy({ protection: { slowHandshake: { minBytesPerSecond: 200 } } });
  t.after(() => p.close());
  const hello = await h.recordClientHello('slow.test');
  const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.5' });
  s.on('error', () => {});
  await new Promise((r) => s.once('connect', r));
  s.write(hello.subarray(0, 10));
  await new Promise((r) => s.once('close', r));
  await h.waitFor(() => p.events.length === 1, { what: 'slow_handshake event' });
  assert.deepEqual([p.events[0].ip, p.events[0].reason], ['127.0.0.5', 'slow_handshake']);
});

test("'blocked' events are capped per second, the rest counted and summarised; a throwing listener is harmless", async (t) => {
  const p = await h.protectedProxy({ protection: { blocklist: ['127.0.0.2'] } }, { blockedEvents: { maxPerSecond: 2 } });
  t.after(() => p.close());
  const summaries = [];
  p.proxy.on('blockedSummary', (s) => summaries.push(s));
  let emitted = 0;
  p.proxy.on('blocked', () => emitted++);
  p.proxy.on('blocked', () => {
    throw new Error('listener bug');
  });
  const warnings = [];
  const onWarn = (w) => warnings.push(w);
  process.on('warning', onWarn);
  t.after(() => process.off('warning', onWarn));
  // 5 refusals in well under a second touch at most two one-second windows of 2 events each
  // (the exact per-window arithmetic is a Rust unit test with an injected clock).
  const start = Date.now();
  for (let i = 0; i < 5; i++) assert.equal(await h.tcpProbe({ port: p.port, localAddress: '127.0.0.2' }), 'closed');
  assert.ok(Date.now() - start < 1000, 'the refusals took over a second');
  const m = p.proxy.metrics();
  assert.equal(m.listeners[0].blockedByReason.cidr_blocked, 5);
  await h.waitFor(() => emitted + p.proxy.metrics().eventsDropped === 5, { what: 'every refusal emitted or counted' });
  const dropped = p.proxy.metrics().eventsDropped;
  assert.ok(dropped >= 1 && dropped <= 3, `eventsDropped ${dropped}`);
  await h.waitFor(() => summaries.reduce((a, s) => a + s.total, 0) === dropped, { timeoutMs: 3000, what: 'blockedSummary' });
  assert.deepEqual(summaries[0].byReason, { cidr_blocked: summaries[0].total });
  assert.deepEqual(summaries[0].topIps, [{ ip: '127.0.0.2', count: summaries[0].total }]);
  await h.waitFor(() => warnings.some((w) => /listener bug/.test(w.message)), { what: 'the warning about the throwing listener' });
  assert.equal(await h.admitted(p.port, '127.0.0.3'), true);
});

test('prometheus() exposes the counters', async (t) => {
  const p = await h.protectedProxy({ protection: { blocklist: ['127.0.0.2'] } });
  t.after(() => p.close());
  assert.equal(await h.admitted(p.port, '127.0.0.2'), false);
  await h.waitFor(() => p.proxy.metrics().blockedConnections === 1, { what: 'count' });
  const text = p.proxy.prometheus();
  assert.match(text, new RegExp(`rampart_blocked_connections_total\\{listener="127\\.0\\.0\\.1:${p.port}",reason="cidr_blocked"\\} 1\\n`));
  assert.match(text, /# TYPE rampart_blocked_connections_total counter/);
});
