'use strict';
// The HTTP/2 guard from outside: a raw frame client (frames written by hand over
// node:tls, ALPN h2) against Rampart in front of a counting upstream (a frame-counting relay before
// a node:http2 server). Each flood is closed with GOAWAY ENHANCE_YOUR_CALM carrying the last
// forwarded stream, reported `h2_flood` with its exact `detail`, and the upstream received at most
// the budget: a GCRA admits `burst` at once and one more per interval, so over a flood that took
// `elapsed` seconds the upstream may see at most `burst + floor(rate × elapsed)` frames of a kind.
// Honest clients (node:http2, curl --http2, a large upload and download) never trip the defaults.
const test = require('node:test');
const assert = require('node:assert/strict');
const http2 = require('node:http2');
const crypto = require('node:crypto');
const { RampartProxy } = require('..');
const h = require('./helpers');
const H = require('./helpers/h2');

const CALM = H.ENHANCE_YOUR_CALM;
const H2_BOX_NOTE = 'boxed by protection.http2.boxAfterViolations';

/**
 * Rampart with one h2 route to a fresh counting upstream (`upstreamSettings`: its SETTINGS). The
 * route's upstream capacity is off: these specs hold streams open that the upstream never
 * answers, and look at the guard's own limits only.
 */
const setup = (t, { upstreamSettings, ...opts } = {}) => H.proxiedUpstream(t, { route: { concurrency: { mode: 'off' } }, ...opts, settings: upstreamSettings });

/**
 * Sends `frames` (after the preface and an empty SETTINGS) in one write, waits for the proxy to
 * close and for the upstream connection to close; returns `{ c, conn, elapsed }` (seconds from
 * the write to the close).
 */
async function flood(s, frames, { localAddress } = {}) {
  const c = await H.rawClient({ port: s.port, localAddress });
  assert.equal(c.alpn, 'h2');
  const n = s.up.conns.length;
  const t0 = process.hrtime.bigint();
  c.write(Buffer.concat([H.PREFACE, H.settings(), ...frames]));
  await h.waitFor(() => c.closed, { what: 'the proxy to close the connection' });
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  await h.waitFor(() => s.up.conns.length > n && s.up.conns[n].closed, { what: 'the upstream connection to close' });
  return { c, conn: s.up.conns[n], elapsed };
}

/** The single 'blocked' event, checked: h2_flood with `detail`, enforced, fingerprints read. */
async function floodEvent(s, detail, ip = '127.0.0.1') {
  await h.waitFor(() => s.events.length >= 1, { what: "the 'blocked' event" });
  assert.equal(s.events.length, 1, JSON.stringify(s.events));
  const e = s.events[0];
  assert.deepEqual([e.ip, e.port, e.reason, e.detail, e.observed], [ip, s.port, 'h2_flood', detail, false]);
  assert.match(e.ja3, /^[0-9a-f]{32}$/);
  assert.match(e.ja4, /^t13d\d{4}h2_/);
  const m = s.metrics();
  assert.equal(m.blockedByReason.h2_flood, 1);
  for (const [d, n] of Object.entries(m.h2FloodByDetail)) assert.equal(n, d === detail ? 1 : 0, d);
  await h.waitFor(() => s.metrics().activeConnections === 0, { what: 'the listener gauge back at 0' });
}

const times = (n, f) => Array.from({ length: n }, (_, i) => f(i));
const budget = (burst, rate, elapsed) => burst + Math.floor(rate * elapsed);

test('rapid reset: HEADERS + RST_STREAM pairs are cut at the reset budget (100 at once, 50/s)', async (t) => {
  const s = await setup(t);
  const pairs = times(10000, (i) => Buffer.concat([H.headers(2 * i + 1), H.rst(2 * i + 1)]));
  const { c, conn, elapsed } = await flood(s, pairs);
  const streams = conn.frames.HEADERS;
  const resets = conn.frames.RST_STREAM;
  assert.deepEqual(c.goaway, { lastStreamId: 2 * streams - 1, errorCode: CALM });
  // Cut at the pair where both budgets ran out: the resets budget is spent, never exceeded.
  assert.ok(resets >= 100 && resets <= budget(100, 50, elapsed), `resets ${resets} in ${elapsed}s`);
  assert.ok(streams - resets === 0 || streams - resets === 1, `${streams} streams, ${resets} resets`);
  assert.ok(streams <= budget(100, 200, elapsed), `streams ${streams}`);
  assert.equal(c.frames.at(-1).type, H.T.GOAWAY);
  await floodEvent(s, 'rapid_reset');
  const prom = s.proxy.prometheus();
  assert.match(prom, new RegExp(`rampart_h2_flood_total\\{listener="127\\.0\\.0\\.1:${s.port}",detail="rapid_reset"\\} 1`));
  assert.match(prom, new RegExp(`rampart_blocked_connections_total\\{listener="127\\.0\\.0\\.1:${s.port}",reason="h2_flood"\\} 1`));
});

test('CONTINUATION flood: the 17th CONTINUATION of a header block never reaches the upstream', async (t) => {
  const s = await setup(t);
  const frames = [H.headers(1, { endHeaders: false }), ...times(100000, () => H.continuation(1))];
  const { c, conn } = await flood(s, frames);
  assert.deepEqual(conn.frames, { SETTINGS: 1, HEADERS: 1, CONTINUATION: 16 });
  assert.deepEqual(c.goaway, { lastStreamId: 1, errorCode: CALM });
  await floodEvent(s, 'continuation');
});

test('header block over maxHeaderBlockBytes (65536) is cut at the CONTINUATION that exceeds it', async (t) => {
  // Each CONTINUATION carries one complete 16000-byte header field, so node:http2 decodes every
  // fragment it gets; the 5th takes the block past 65536 bytes.
  const s = await setup(t, { upstreamSettings: { maxHeaderListSize: 1 << 20 } });
  const field = H.literalField('x-big', 'a'.repeat(16000 - 10));
  const frames = [H.headers(1, { endHeaders: false }), ...times(8, () => H.continuation(1, field))];
  const first = H.requestBlock().length;
  assert.ok(first + 4 * field.length <= 65536 && first + 5 * field.length > 65536);
  const { c, conn } = await flood(s, frames);
  assert.deepEqual(conn.frames, { SETTINGS: 1, HEADERS: 1, CONTINUATION: 4 });
  assert.deepEqual(c.goaway, { lastStreamId: 1, errorCode: CALM });
  await floodEvent(s, 'header_block');
});

for (const [name, make, kind] of [
  ['PING', () => H.ping(), 'PING'],
  ['SETTINGS', () => H.settings(), 'SETTINGS'],
  ['zero-increment WINDOW_UPDATE', () => H.windowUpdate(0, 0), 'WINDOW_UPDATE'],
]) {
  test(`${name} flood is cut at the control-frame budget (200 at once, 100/s)`, async (t) => {
    const s = await setup(t);
    const { c, conn, elapsed } = await flood(s, times(10000, make));
    // The client's own SETTINGS is a control frame too.
    const control = (conn.frames[kind] || 0) + (kind === 'SETTINGS' ? 0 : conn.frames.SETTINGS);
    assert.ok(control >= 200 && control <= budget(200, 100, elapsed), `${control} control frames in ${elapsed}s`);
    assert.deepEqual(Object.keys(conn.frames).sort(), [...new Set(['SETTINGS', kind])].sort());
    assert.deepEqual(c.goaway, { lastStreamId: 0, errorCode: CALM });
    await floodEvent(s, 'control_frames');
  });
}

test('too many concurrent streams: the 101st open stream is refused; SETTINGS carry 100', async (t) => {
  // The upstream advertises 1000 and never answers, so every stream stays open.
  const s = await setup(t, { handler: () => {} });
  const c = await H.rawClient({ port: s.port });
  c.write(Buffer.concat([H.PREFACE, H.settings()]));
  await h.waitFor(() => c.settings.length === 2, { what: "Rampart's SETTINGS, then the upstream's" });
  assert.equal(c.settings[0][0x3], 100, "Rampart's SETTINGS carry the limit");
  assert.equal(c.settings[1][0x3], 100, "the upstream's SETTINGS_MAX_CONCURRENT_STREAMS lowered from 1000");
  c.write(Buffer.concat(times(101, (i) => H.headers(2 * i + 1, { endStream: false }))));
  await h.waitFor(() => c.closed, { what: 'the proxy to close the connection' });
  const conn = s.up.conns[0];
  await h.waitFor(() => conn.closed, { what: 'the upstream connection to close' });
  assert.equal(conn.frames.HEADERS, 100);
  await h.waitFor(() => s.up.streams === 100, { what: 'node:http2 to see 100 streams' });
  assert.deepEqual(c.goaway, { lastStreamId: 199, errorCode: CALM });
  await floodEvent(s, 'concurrent_streams');
});

test('upstream-side resets (MadeYouReset) count: RST_STREAM from the upstream over 100 + 50/s', async (t) => {
  const s = await setup(t, { handler: (stream) => stream.close(http2.constants.NGHTTP2_CANCEL) });
  const c = await H.rawClient({ port: s.port });
  const t0 = process.hrtime.bigint();
  c.write(Buffer.concat([H.PREFACE, H.settings()]));
  // Batches of 10 requests, each sent once the previous batch was reset: the resets come from the
  // upstream, never from the client.
  let next = 1;
  while (!c.closed && next < 2000) {
    const batch = times(10, (i) => H.headers(next + 2 * i));
    next += 20;
    await c.write(Buffer.concat(batch));
    const want = (next - 1) / 2;
    await h.waitFor(() => c.closed || (c.count.RST_STREAM || 0) >= want, { what: `${want} upstream resets` });
  }
  await h.waitFor(() => c.closed, { what: 'the proxy to close the connection' });
  const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  const conn = s.up.conns[0];
  await h.waitFor(() => conn.closed, { what: 'the upstream connection to close' });
  assert.equal(conn.frames.RST_STREAM, undefined, 'the client reset nothing');
  const got = c.count.RST_STREAM;
  assert.ok(got >= 100 && got <= budget(100, 50, elapsed), `${got} resets reached the client in ${elapsed}s`);
  assert.deepEqual(c.goaway, { lastStreamId: 2 * conn.frames.HEADERS - 1, errorCode: CALM });
  await floodEvent(s, 'rapid_reset');
});

test('a client that violates boxAfterViolations (3) times within 60 s is penalty-boxed for 600000 ms', async (t) => {
  const s = await setup(t);
  const pings = times(1000, () => H.ping());
  for (let i = 0; i < 3; i++) {
    const { c } = await flood(s, pings, { localAddress: '127.0.0.5' });
    assert.equal(c.goaway.errorCode, CALM);
  }
  await h.waitFor(() => s.events.length === 3, { what: 'three h2_flood events' });
  assert.deepEqual(
    s.events.map((e) => [e.ip, e.reason, e.detail]),
    times(3, () => ['127.0.0.5', 'h2_flood', 'control_frames'])
  );
  // The fourth connection is refused at accept.
  await assert.rejects(H.rawClient({ port: s.port, localAddress: '127.0.0.5' }));
  await h.waitFor(() => s.events.length === 4, { what: 'the penalty_boxed event' });
  assert.deepEqual([s.events[3].ip, s.events[3].reason, s.events[3].detail], ['127.0.0.5', 'penalty_boxed', '']);
  const boxed = s.proxy.blockedIps({ detail: true }).penaltyBoxed;
  assert.equal(boxed.length, 1);
  assert.deepEqual([boxed[0].ip, boxed[0].port, boxed[0].reason, boxed[0].note], ['127.0.0.5', s.port, 'penalty_boxed', H2_BOX_NOTE]);
  assert.ok(boxed[0].remainingMs > 590000 && boxed[0].remainingMs <= 600000, String(boxed[0].remainingMs));
  assert.deepEqual(s.proxy.blockedIps().penaltyBoxed, ['127.0.0.5']);
  // Another client is not affected.
  const other = await H.rawClient({ port: s.port, localAddress: '127.0.0.6' });
  assert.equal(other.alpn, 'h2');
  other.socket.destroy();
  const m = s.metrics();
  assert.deepEqual([m.blockedByReason.h2_flood, m.blockedByReason.penalty_boxed, m.h2FloodByDetail.control_frames], [3, 1, 3]);
});

test('with a penaltyBox the box lasts its durationMs; boxAfterViolations: 1 boxes at once', async (t) => {
  const s = await setup(t, { protection: { penaltyBox: { durationMs: 1500 }, http2: { boxAfterViolations: 1 } } });
  await flood(
    s,
    times(1000, () => H.ping()),
    { localAddress: '127.0.0.7' }
  );
  await assert.rejects(H.rawClient({ port: s.port, localAddress: '127.0.0.7' }));
  const [b] = s.proxy.blockedIps({ detail: true }).penaltyBoxed;
  assert.ok(b.ip === '127.0.0.7' && b.remainingMs <= 1500, JSON.stringify(b));
  // Readmitted at the deadline (polled, not slept).
  const c = await h.waitFor(() => H.rawClient({ port: s.port, localAddress: '127.0.0.7' }).catch(() => null), {
    timeoutMs: 5000,
    intervalMs: 100,
    what: 'readmission',
  });
  assert.equal(c.alpn, 'h2');
  c.socket.destroy();
  assert.deepEqual(s.proxy.blockedIps().penaltyBoxed, []);
});

test('protection.http2 is validated with paths, in the constructor and in updateConfig (nothing changes)', async (t) => {
  const errorsOf = (fn) => {
    try {
      fn();
    } catch (e) {
      assert.equal(e.code, 'ERR_RAMPART_CONFIG');
      return e.errors;
    }
    assert.fail('expected a ConfigError');
  };
  const base = { routes: [{ sni: '', terminateTls: true, http2: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }] };
  const cert = h.selfSigned(['localhost']);
  assert.deepEqual(
    errorsOf(
      () =>
        new RampartProxy({
          ...base,
          listeners: [{ port: 1, defaultCert: cert, protection: { http2: { maxResetsPerSecond: NaN, boxAfterViolations: 0, enabled: 'no' } } }],
        })
    ),
    [
      { path: 'listeners[0].protection.http2.enabled', message: 'must be a boolean, got "no"' },
      { path: 'listeners[0].protection.http2.maxResetsPerSecond', message: 'must be a finite number > 0, got NaN' },
      { path: 'listeners[0].protection.http2.boxAfterViolations', message: 'must be an integer in [1, 1000], got 0' },
    ]
  );
  const s = await setup(t, { protection: { http2: { maxConcurrentStreams: 5 } }, handler: () => {} });
  assert.deepEqual(
    errorsOf(() => s.proxy.updateConfig({ protection: [{ port: s.port, protection: { http2: { maxConcurrentStreams: 10001 } } }] })),
    [{ path: 'protection[0].protection.http2.maxConcurrentStreams', message: 'must be an integer in [1, 10000], got 10001' }]
  );
  // Still the old limit: the 6th open stream is refused.
  const c = await H.rawClient({ port: s.port });
  c.write(Buffer.concat([H.PREFACE, H.settings(), ...times(6, (i) => H.headers(2 * i + 1, { endStream: false }))]));
  await h.waitFor(() => c.closed, { what: 'the close' });
  assert.deepEqual(c.goaway, { lastStreamId: 9, errorCode: CALM });
  await floodEvent(s, 'concurrent_streams');
  // A valid update applies to the next connection.
  s.proxy.updateConfig({ protection: [{ port: s.port, protection: { http2: { maxConcurrentStreams: 6 } } }] });
  const d = await H.rawClient({ port: s.port });
  d.write(Buffer.concat([H.PREFACE, H.settings(), ...times(6, (i) => H.headers(2 * i + 1, { endStream: false }))]));
  await h.waitFor(() => s.up.streams === 11, { what: 'six more streams at the upstream' });
  assert.equal(d.closed, false);
  d.socket.destroy();
});

test('enabled: false turns the guard off for that listener', async (t) => {
  const s = await setup(t, { protection: { http2: { enabled: false } }, handler: () => {} });
  const c = await H.rawClient({ port: s.port });
  c.write(Buffer.concat([H.PREFACE, H.settings(), ...times(150, (i) => H.headers(2 * i + 1, { endStream: false }))]));
  await h.waitFor(() => s.up.streams === 150, { what: 'all 150 streams at the upstream' });
  await h.waitFor(() => c.settings.length === 2, { what: "Rampart's SETTINGS, then the upstream's" });
  assert.equal(c.settings[1][0x3], 1000, 'not rewritten');
  assert.equal(c.closed, false);
  assert.equal(c.goaway, null);
  c.socket.destroy();
  assert.equal(s.events.length, 0);
});

test('observe mode reports h2_flood (observed) and forwards everything', async (t) => {
  const s = await setup(t, { protection: { mode: 'observe' } });
  const c = await H.rawClient({ port: s.port });
  // 400 PINGs: twice the budget, and below what node:http2 itself tolerates unacknowledged. A
  // listener with a policy holds an HTTP route's connection until its first request head
  // (slowRequest), so a request on stream 1 comes first.
  c.write(Buffer.concat([H.PREFACE, H.settings(), H.headers(1), ...times(400, () => H.ping())]));
  await h.waitFor(() => s.up.conns[0] && s.up.conns[0].frames.PING === 400, { what: 'all 400 PINGs at the upstream' });
  await h.waitFor(() => (c.count.PING || 0) === 400, { what: '400 PING ACKs back' });
  assert.equal(c.closed, false);
  await h.waitFor(() => s.events.length === 1, { what: 'the observed event' });
  assert.deepEqual([s.events[0].reason, s.events[0].detail, s.events[0].observed], ['h2_flood', 'control_frames', true]);
  c.socket.destroy();
});

test('a client that is not speaking HTTP/2 on an h2 connection is closed, counted, not a flood', async (t) => {
  const s = await setup(t);
  const c = await H.rawClient({ port: s.port });
  c.write(Buffer.from('GET / HTTP/1.1\r\nHost: localhost\r\n\r\n'));
  await h.waitFor(() => c.closed, { what: 'the close' });
  await h.waitFor(() => s.metrics().errorsByReason.h2_protocol_error === 1, { what: 'h2_protocol_error' });
  // Only Rampart's SETTINGS, sent right after the handshake; no GOAWAY for a client without a preface.
  assert.deepEqual(
    c.frames.map((f) => f.type),
    [H.T.SETTINGS]
  );
  assert.equal(c.goaway, null);
  assert.equal(s.events.length, 0);
});

test('no false positive: node:http2, 500 requests over 100 concurrent streams', async (t) => {
  const s = await setup(t);
  const session = http2.connect(`https://localhost:${s.port}`, { rejectUnauthorized: false });
  session.on('error', () => {});
  const get = H.getter(session);
  // 100 workers, 5 requests each: 100 streams open at once, 500 in all.
  const results = (
    await Promise.all(
      times(100, async (w) => {
        const out = [];
        for (let i = 0; i < 5; i++) out.push(await get(`/${w}/${i}`));
        return out;
      })
    )
  ).flat();
  assert.equal(results.length, 500);
  assert.ok(results.every(([st, b]) => st === 200 && b === 'ok'));
  assert.equal(session.remoteSettings.maxConcurrentStreams, 100);
  session.close();
  assert.equal(s.up.streams, 500);
  assert.equal(s.events.length, 0, JSON.stringify(s.events));
  assert.equal(s.metrics().blockedByReason.h2_flood, 0);
});

test('no false positive: curl --http2, 500 requests multiplexed over 100 concurrent streams', async (t) => {
  if (!h.needTool(t, 'curl')) return;
  const s = await setup(t);
  const r = await h.run(
    'curl',
    [
      '-sk',
      '--http2',
      '--parallel',
      '--parallel-max',
      '100',
      '--max-time',
      '30',
      '--resolve',
      `localhost:${s.port}:127.0.0.1`,
      '-w',
      '%{http_code} %{http_version}\\n',
      '-o',
      '/dev/null',
      `https://localhost:${s.port}/[1-500]`,
    ],
    { timeoutMs: 40000 }
  );
  assert.equal(r.code, 0, r.stderr.toString());
  const lines = r.stdout.toString().trim().split('\n');
  assert.equal(lines.length, 500);
  assert.ok(
    lines.every((l) => l === '200 2'),
    lines.find((l) => l !== '200 2')
  );
  assert.equal(s.up.streams, 500);
  assert.equal(s.events.length, 0, JSON.stringify(s.events));
  assert.equal(s.metrics().blockedByReason.h2_flood, 0);
});

test('no false positive: a 32 MiB upload and a 32 MiB download over h2 arrive intact', async (t) => {
  const download = crypto.randomBytes(32 << 20);
  const s = await setup(t, {
    handler: (stream, hd) => {
      if (hd[':method'] === 'POST') {
        const hash = crypto.createHash('sha256');
        stream.on('data', (d) => hash.update(d));
        stream.on('end', () => {
          stream.respond({ ':status': 200 });
          stream.end(hash.digest('hex'));
        });
      } else {
        stream.respond({ ':status': 200 });
        stream.end(download);
      }
    },
  });
  const session = http2.connect(`https://localhost:${s.port}`, { rejectUnauthorized: false });
  session.on('error', () => {});
  const upload = crypto.randomBytes(32 << 20);
  const sent = await new Promise((resolve, reject) => {
    const r = session.request({ ':method': 'POST', ':path': '/up' });
    let body = '';
    r.on('data', (d) => (body += d));
    r.on('end', () => resolve(body));
    r.on('error', reject);
    r.end(upload);
  });
  assert.equal(sent, h.sha256(upload));
  const got = await new Promise((resolve, reject) => {
    const r = session.request({ ':path': '/down' });
    const parts = [];
    r.on('data', (d) => parts.push(d));
    r.on('end', () => resolve(Buffer.concat(parts)));
    r.on('error', reject);
  });
  assert.equal(got.length, download.length);
  assert.equal(h.sha256(got), h.sha256(download));
  session.close();
  assert.equal(s.events.length, 0, JSON.stringify(s.events));
});
