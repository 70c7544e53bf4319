'use strict';
// Every terminated h2 client gets Rampart's own SETTINGS (the server connection preface, with
// SETTINGS_MAX_CONCURRENT_STREAMS = the guard's limit) right after the handshake, before any
// upstream exists: a client that waits for it before its first request is served on every
// listener, and an upstream that advertises no stream limit (node:http2's default SETTINGS carry
// none) leaves honest clients at Rampart's limit instead of unlimited. The client's ACK of that
// frame never reaches the upstream (node:http2 would close on an ACK it did not ask for). And a
// TCP connection that closes without a byte is client_closed, never a 'blocked' event.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const http2 = require('node:http2');
const h = require('./helpers');
const H = require('./helpers/h2');

const MAX_CONCURRENT_STREAMS = 0x3;

const setup = (t, opts) => H.proxiedUpstream(t, opts);

const listeners = [
  ['protection: {}', {}],
  ['protection: { http2: { enabled: false } }', { http2: { enabled: false } }],
  ['no protection', undefined],
];

for (const [name, protection] of listeners) {
  test(`a client that waits for the server's SETTINGS gets them at once, then its request succeeds (${name})`, async (t) => {
    const s = await setup(t, { protection });
    // A client like h2spec or grpc: preface and SETTINGS, then nothing until the server's
    // SETTINGS; every SETTINGS it receives is acknowledged, as RFC 9113 §6.5.3 requires.
    let c;
    c = await H.rawClient({
      port: s.port,
      onFrame: (f) => {
        if (f.type === H.T.SETTINGS && !(f.flags & H.F.ACK)) c.write(H.settingsAck());
      },
    });
    assert.equal(c.alpn, 'h2');
    c.write(Buffer.concat([H.PREFACE, H.settings([[0x4, 65535]])]));
    // Well within slowRequest.headTimeoutMs (10 s), and before any request was sent.
    await h.waitFor(() => c.settings.length >= 1, { timeoutMs: 2000, what: "the server's SETTINGS" });
    assert.equal(c.frames[0].type, H.T.SETTINGS, 'the first frame is SETTINGS');
    assert.deepEqual(c.settings[0], { [MAX_CONCURRENT_STREAMS]: 100 });
    c.write(H.headers(1));
    await h.waitFor(() => c.frames.some((f) => f.type === H.T.DATA && f.stream === 1 && f.flags & H.F.END_STREAM), {
      what: 'the response on stream 1',
    });
    const body = Buffer.concat(c.frames.filter((f) => f.type === H.T.DATA && f.stream === 1).map((f) => f.payload));
    assert.equal(body.toString(), 'ok');
    // The upstream's own SETTINGS came second, and the client's ACK of them reached it.
    await h.waitFor(() => c.settings.length === 2, { what: "the upstream's SETTINGS" });
    const conn = s.up.conns[0];
    await h.waitFor(() => conn.frames.SETTINGS === 2, { what: "the client's SETTINGS and its ACK of the upstream's" });
    // The ACK of Rampart's SETTINGS reached the upstream as a frame it ignores (type 0xf0).
    assert.deepEqual(conn.frames, { SETTINGS: 2, '0xf0': 1, HEADERS: 1 });
    assert.equal(s.up.streams, 1);
    assert.equal(c.goaway, null);
    assert.equal(c.closed, false);
    c.socket.destroy();
    assert.deepEqual(s.events, []);
    assert.equal(s.metrics().errors, 0);
  });
}

test("the ACK of Rampart's SETTINGS sent with the preface and the request in one write", async (t) => {
  // The client sends preface, SETTINGS, its ACK and the request in one write after reading
  // Rampart's SETTINGS: all of it lands in the request head read before the upstream exists.
  const s = await setup(t, { protection: {} });
  const c = await H.rawClient({ port: s.port });
  await h.waitFor(() => c.settings.length === 1, { timeoutMs: 2000, what: "Rampart's SETTINGS" });
  c.write(Buffer.concat([H.PREFACE, H.settings(), H.settingsAck(), H.headers(1)]));
  await h.waitFor(() => c.frames.some((f) => f.type === H.T.DATA && f.stream === 1 && f.flags & H.F.END_STREAM), {
    what: 'the response on stream 1',
  });
  assert.deepEqual(s.up.conns[0].frames, { SETTINGS: 1, '0xf0': 1, HEADERS: 1 });
  assert.equal(c.goaway, null);
  c.socket.destroy();
});

const getter = H.getter;

/**
 * An upstream whose SETTINGS carry no SETTINGS_MAX_CONCURRENT_STREAMS (node:http2's default) and
 * that answers nothing until `hold` streams are open at once: the client must reach the
 * advertised limit without being taken for a flood.
 */
function holdUntil(hold) {
  const held = [];
  let released = false;
  const answer = (st) => {
    st.respond({ ':status': 200 });
    st.end('ok');
  };
  return (stream) => {
    if (released) return answer(stream);
    held.push(stream);
    if (held.length === hold) {
      released = true;
      for (const st of held.splice(0)) answer(st);
    }
  };
}

for (const [name, protection] of [
  ['protection: {}', {}],
  ['no protection', undefined],
]) {
  test(`an upstream without SETTINGS_MAX_CONCURRENT_STREAMS: node:http2, 150 requests at once all succeed, 100 open at once (${name})`, async (t) => {
    // The upstream answers only once 100 streams are open: the route's capacity limit (which
    // would hold streams past its initial limit until some are answered) is off.
    const route = { concurrency: { mode: 'off' } };
    const s = await setup(t, { protection, route, settings: { maxConcurrentStreams: undefined }, handler: holdUntil(100) });
    const session = http2.connect(`https://localhost:${s.port}`, { rejectUnauthorized: false });
    session.on('error', () => {});
    t.after(() => session.destroy());
    const get = getter(session);
    const results = await Promise.all(Array.from({ length: 150 }, (_, i) => get(`/${i}`)));
    assert.equal(results.filter(([st, b]) => st === 200 && b === 'ok').length, 150);
    assert.equal(session.remoteSettings.maxConcurrentStreams, 100, "Rampart's limit stands: the upstream's SETTINGS change nothing");
    assert.equal(s.up.streams, 150);
    assert.deepEqual(s.events, []);
    assert.equal(s.metrics().blockedByReason.h2_flood, 0);
  });
}

test('an upstream without SETTINGS_MAX_CONCURRENT_STREAMS: nghttp -m 150, 150/150', async (t) => {
  if (!h.needTool(t, 'nghttp', 'apt-get install nghttp2-client')) return;
  const s = await setup(t, { protection: {}, settings: { maxConcurrentStreams: undefined } });
  const r = await h.run('nghttp', ['-n', '-s', '-m', '150', `https://127.0.0.1:${s.port}/`], { timeoutMs: 30000 });
  assert.equal(r.code, 0, r.stderr.toString());
  // -s prints one line per completed request: "<id> +<responseEnd> +<requestStart> <process>
  // <code> <size> <path>".
  const done = r.stdout
    .toString()
    .split('\n')
    .filter((l) => /^\s*\d+\s+\+\S+\s+\+\S+\s+\S+\s+200\s+2\s+\/$/.test(l));
  assert.equal(done.length, 150, r.stdout.toString());
  assert.equal(s.up.streams, 150);
  assert.deepEqual(s.events, []);
  assert.equal(s.metrics().blockedByReason.h2_flood, 0);
});

test('an upstream without SETTINGS_MAX_CONCURRENT_STREAMS: h2load -m 200, 2000/2000', async (t) => {
  if (!h.needTool(t, 'h2load', 'apt-get install nghttp2-client')) return;
  const s = await setup(t, { protection: {}, settings: { maxConcurrentStreams: undefined } });
  const r = await h.run('h2load', ['-n', '2000', '-c', '1', '-m', '200', `https://127.0.0.1:${s.port}/`], { timeoutMs: 60000 });
  assert.equal(r.code, 0, r.stderr.toString());
  const out = r.stdout.toString();
  assert.match(out, /requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored, 0 timeout/, out);
  assert.match(out, /status codes: 2000 2xx/, out);
  assert.equal(s.up.streams, 2000);
  assert.deepEqual(s.events, []);
  assert.equal(s.metrics().blockedByReason.h2_flood, 0);
});

test('a TCP connection that closes without a byte is client_closed, never blocked, whatever lists are set', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      ja4Blocklist: ['t13d1516h2_8daaf6152771_e5627efa2ab1'],
      ja3Blocklist: ['0123456789abcdef0123456789abcdef'],
      allowlist: ['127.0.0.2'],
      requireSni: true,
    },
  });
  t.after(() => p.close());
  const m = () => p.proxy.metrics().listeners[0];
  // A health check from a listed-as-nothing address, then one from the allowlisted address.
  for (const [i, localAddress] of ['127.0.0.1', '127.0.0.2'].entries()) {
    const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress });
    s.on('error', () => {});
    await new Promise((r) => s.once('connect', r));
    s.end();
    await h.waitFor(() => m().errorsByReason.client_closed === i + 1, { what: `client_closed ${i + 1}` });
    await h.waitFor(() => m().activeConnections === 0, { what: 'the connection gone' });
  }
  const after = m();
  assert.deepEqual(p.events, []);
  assert.equal(after.blocked, 0);
  assert.ok(
    Object.values(after.blockedByReason).every((n) => n === 0),
    JSON.stringify(after.blockedByReason)
  );
  assert.equal(after.errors, 2);
  assert.equal(after.errorsByReason.client_closed, 2);
  assert.equal(after.accepted, 2);
});
