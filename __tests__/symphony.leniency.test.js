'use strict';
// Where Symphony is more lenient than Rampart and SymphonyProxy follows it (docs/symphony.md):
// copy-buffer sizes out of range are clamped with a warning, a route whose upstreams are all
// 'h2' fails to build and is left out (reported), and a mode 'http' listener redirects every
// Host. RampartProxy keeps refusing the first, serving the second and answering 404.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const tls = require('node:tls');
const { RampartProxy, SymphonyProxy, ConfigError } = require('..');
const h = require('./helpers');

/** Collects the process warnings of `code` until the returned `stop()` is called. */
function warningsOf(code) {
  const seen = [];
  const on = (w) => {
    if (w.code === code) seen.push(w.message);
  };
  process.on('warning', on);
  return { seen, stop: () => process.off('warning', on) };
}

/** `n` bytes, distinguishable per position (a dropped or reordered chunk fails the compare). */
function patterned(n) {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = i % 251;
  return b;
}

/** Writes `request` on a fresh connection and resolves everything the server sent until it closed. */
function rawHttp(port, request) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port, host: '127.0.0.1' }, () => s.write(request));
    const chunks = [];
    s.on('data', (c) => chunks.push(c));
    s.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    s.on('error', reject);
  });
}

test('copy buffers: SymphonyProxy clamps an out-of-range size to [512, 1048576] and warns; RampartProxy refuses it', async (t) => {
  const echo = await h.echoServer();
  const cert = h.selfSigned(['localhost']);
  const port = await h.freePort();
  const config = (buffers) => ({
    listeners: [{ host: '127.0.0.1', port }],
    routes: [{ sni: 'localhost', terminateTls: true, cert, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] }],
    ...buffers,
  });
  const warned = warningsOf('SYMPHONY_BUFFER_CLAMPED');
  t.after(() => warned.stop());
  const proxy = new SymphonyProxy(config({ readBufferSize: 0, upstreamReadBufferSize: 4_000_000 }));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  await h.waitFor(() => warned.seen.length === 2, { what: 'two clamp warnings' });
  assert.deepEqual(warned.seen, [
    'readBufferSize 0 is outside [512, 1048576]; using 512',
    'upstreamReadBufferSize 4000000 is outside [512, 1048576]; using 1048576',
  ]);
  // The clamped buffers carry a payload 128 times the smaller one, byte for byte.
  const payload = patterned(64 * 1024);
  const r = await h.tlsRoundTrip({ port, servername: 'localhost', payload, expect: payload.length });
  assert.equal(r.data.length, payload.length);
  assert.ok(r.data.equals(payload), 'payload round-tripped byte for byte');

  // In range: no warning. Not an integer: refused by both classes.
  assert.ok(new SymphonyProxy(config({ readBufferSize: 512, clientReadBufferSize: 1_048_576 })));
  assert.deepEqual(
    h.errorsOf(() => new SymphonyProxy(config({ readBufferSize: 'big' }))),
    [{ path: 'readBufferSize', message: 'must be an integer in [512, 1048576], got "big"' }]
  );
  // RampartProxy: an out-of-range size is a ConfigError, never clamped.
  assert.deepEqual(
    h.errorsOf(() => new RampartProxy(config({ readBufferSize: 0, upstreamReadBufferSize: 4_000_000 }))),
    [
      { path: 'readBufferSize', message: 'must be an integer in [512, 1048576], got 0' },
      { path: 'upstreamReadBufferSize', message: 'must be an integer in [512, 1048576], got 4000000' },
    ]
  );
  await new Promise((r) => setImmediate(r));
  assert.equal(warned.seen.length, 2);
});

const ALL_H2 = "every upstream is protocol: 'h2': the route needs an upstream without protocol (HTTP/1.x) beside them";
const H2_PASSTHROUGH = "protocol: 'h2' upstreams need terminateTls: true (the ALPN the proxy negotiates picks the upstream)";

test("'h2' upstreams alone, or on a passthrough route: SymphonyProxy leaves the route out and reports it, as Symphony; RampartProxy serves h2 alone", async (t) => {
  const h1 = await h.echoServer({ tag: 'h1' });
  const port = await h.freePort();
  const cert = h.selfSigned(['a.test', 'allh2.test']);
  const tcp = { kind: 'tcp', host: '127.0.0.1', port: h1.address().port };
  const h2only = { kind: 'uds', path: '/tmp/rampart-never-h2.sock', protocol: 'h2' };
  const plain = { sni: 'a.test', terminateTls: true, upstreams: [tcp] };
  const allH2 = { sni: 'allh2.test', terminateTls: true, http2: true, upstreams: [h2only, { ...h2only, path: '/tmp/rampart-never-h2b.sock' }] };
  const listeners = [{ host: '127.0.0.1', port, defaultCert: cert }];
  const proxy = new SymphonyProxy({ listeners, routes: [plain, allH2] });
  const failed = [];
  proxy.on('error', (err) => failed.push(err));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(h1);
  });
  await h.waitFor(() => failed.length === 1, { what: "'error' route_failed" });
  const e = failed[0];
  assert.deepEqual(
    [e.code, e.route, e.index, e.errors, e.lastGoodCert],
    ['route_failed', 'allh2.test', 1, [{ path: 'routes[1].upstreams', message: ALL_H2 }], false]
  );
  assert.equal(e.message, `route "allh2.test" (routes[1]) failed to build and is not served; the other routes are: routes[1].upstreams: ${ALL_H2}`);
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes], [1, 1]);
  // The other route serves; the one left out has no route.
  const ok = await h.tlsRoundTrip({ port, servername: 'a.test', payload: Buffer.from('ping'), expect: 6 });
  assert.equal(ok.data.toString(), 'h1ping');
  await assert.rejects(h.tlsRoundTrip({ port, servername: 'allh2.test', ALPNProtocols: ['h2', 'http/1.1'] }), { code: 'ECONNRESET' });
  await h.waitFor(() => proxy.metrics().listeners[0].errorsByReason.find((r) => r.reason === 'no_route').count === 1, { what: 'no_route' });

  // Alone in the constructor: the proxy starts serving no route (Symphony's behaviour).
  const alone = new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: await h.freePort(), defaultCert: cert }], routes: [allH2] });
  const aloneFailed = [];
  alone.on('error', (err) => aloneFailed.push(err));
  await h.waitFor(() => aloneFailed.length === 1, { what: "the lone route's 'error'" });
  assert.deepEqual([aloneFailed[0].index, aloneFailed[0].errors], [0, [{ path: 'routes[0].upstreams', message: ALL_H2 }]]);
  assert.deepEqual([alone.metrics().routes, alone.metrics().failingRoutes], [0, 1]);
  // updateConfig in which no route would serve fails whole and changes nothing.
  assert.deepEqual(
    h.errorsOf(() => proxy.updateConfig({ routes: [allH2] })),
    [{ path: 'routes[0].upstreams', message: ALL_H2 }]
  );
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes], [1, 1]);
  // A suspended route has no upstreams to judge.
  assert.ok(new SymphonyProxy({ listeners, routes: [{ ...allH2, suspended: true }] }));
  // An 'h2' upstream on a passthrough route: left out the same way (here through updateConfig).
  const passthrough = { sni: 'pass.test', terminateTls: false, upstreams: [tcp, h2only] };
  proxy.updateConfig({ routes: [plain, passthrough] });
  await h.waitFor(() => failed.length === 2, { what: "the update's 'error'" });
  assert.deepEqual(
    [failed[1].code, failed[1].route, failed[1].index, failed[1].errors],
    ['route_failed', 'pass.test', 1, [{ path: 'routes[1].terminateTls', message: H2_PASSTHROUGH }]]
  );
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes], [1, 1]);
  assert.equal((await h.tlsRoundTrip({ port, servername: 'a.test', payload: Buffer.from('pong'), expect: 6 })).data.toString(), 'h1pong');

  // RampartProxy serves such a route, offering h2 alone.
  const rPort = await h.freePort();
  const rampart = new RampartProxy({ listeners: [{ host: '127.0.0.1', port: rPort, defaultCert: cert }], routes: [allH2] });
  await rampart.start();
  t.after(() => rampart.stop());
  assert.equal(rampart.metrics().failingRoutes, 0);
  const alpn = await new Promise((resolve, reject) => {
    const s = tls.connect({ port: rPort, host: '127.0.0.1', servername: 'allh2.test', ALPNProtocols: ['h2', 'http/1.1'], rejectUnauthorized: false }, () => {
      resolve(s.alpnProtocol);
      s.destroy();
    });
    s.on('error', reject);
  });
  assert.equal(alpn, 'h2');
});

test("a route set apart by an 'h2' rule is the engine's route failure: prometheus() counts it in rampart_failing_routes; RampartProxy with symphonyRouteRules gets the same rules", async (t) => {
  const cert = h.selfSigned(['a.test', 'allh2.test']);
  const tcp = { kind: 'tcp', host: '127.0.0.1', port: 1 };
  const h2only = { kind: 'uds', path: '/tmp/rampart-never-h2.sock', protocol: 'h2' };
  const routes = [
    { sni: 'a.test', terminateTls: true, upstreams: [tcp] },
    { sni: 'allh2.test', terminateTls: true, upstreams: [h2only] },
    { sni: 'pass.test', terminateTls: false, upstreams: [tcp, h2only] },
  ];
  const lines = (text) => text.split('\n').filter((l) => /^rampart_(routes|failing_routes|route_failures_total) /.test(l));
  const expected = ['rampart_routes 1', 'rampart_failing_routes 2', 'rampart_route_failures_total 2'];
  const symphony = new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: await h.freePort(), defaultCert: cert }], routes });
  t.after(() => symphony.stop());
  const failed = [];
  symphony.on('error', (err) => failed.push(err));
  await h.waitFor(() => failed.length === 2, { what: "two 'error' route_failed" });
  assert.deepEqual(lines(symphony.prometheus()), expected);
  assert.deepEqual([symphony.metrics().routes, symphony.metrics().failingRoutes], [1, 2]);

  // The option on RampartProxy: the same failures, as engine events and counts.
  const config = { listeners: [{ host: '127.0.0.1', port: await h.freePort(), defaultCert: cert }], routes, symphonyRouteRules: true };
  const rampart = new RampartProxy(config);
  t.after(() => rampart.stop());
  const events = [];
  rampart.on('error', (e) => events.push(e));
  await h.waitFor(() => events.length === 2, { what: "RampartProxy's two 'error' route_failed" });
  assert.deepEqual(
    events.map((e) => [e.code, e.route, e.index, e.errors]),
    [
      ['route_failed', 'allh2.test', 1, [{ path: 'routes[1].upstreams', message: ALL_H2 }]],
      ['route_failed', 'pass.test', 2, [{ path: 'routes[2].terminateTls', message: H2_PASSTHROUGH }]],
    ]
  );
  assert.deepEqual(lines(rampart.prometheus()), expected);
  // A value that is not a boolean is refused; without the option both routes serve.
  assert.deepEqual(
    h.errorsOf(() => new RampartProxy({ ...config, symphonyRouteRules: 1 })),
    [{ path: 'symphonyRouteRules', message: 'must be a boolean, got 1' }]
  );
  const plain = new RampartProxy({ ...config, symphonyRouteRules: false });
  t.after(() => plain.stop());
  assert.deepEqual(lines(plain.prometheus()), ['rampart_routes 3', 'rampart_failing_routes 0', 'rampart_route_failures_total 0']);
});

test("mode 'http': SymphonyProxy redirects a Host no route serves (ACME for it stays 404); RampartProxy answers 404 unless redirectUnknownHosts", async (t) => {
  const sPort = await h.freePort();
  const rPort = await h.freePort();
  const routes = [{ sni: 'example.com', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] }];
  const symphony = new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: sPort, mode: 'http' }], routes });
  const rampart = new RampartProxy({ listeners: [{ host: '127.0.0.1', port: rPort, mode: 'http' }], routes });
  await symphony.start();
  await rampart.start();
  t.after(async () => {
    await symphony.stop();
    await rampart.stop();
  });
  const NOT_FOUND = 'HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 14\r\nConnection: close\r\n\r\n404 Not Found\n';
  const get = (target, host) => `GET ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;

  const redirect = await rawHttp(sPort, get('/some/page?x=1', 'Stranger.Example.net:8080'));
  assert.equal(
    redirect,
    'HTTP/1.1 301 Moved Permanently\r\nLocation: https://stranger.example.net/some/page?x=1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
  );
  assert.equal(await rawHttp(sPort, get('/.well-known/acme-challenge/abc', 'stranger.example.net')), NOT_FOUND);
  await h.waitFor(() => symphony.rampartMetrics().listeners[0].errorsByReason.no_route === 1, { what: 'the ACME 404 counted no_route' });

  assert.equal(await rawHttp(rPort, get('/some/page?x=1', 'stranger.example.net')), NOT_FOUND);
  // Served names are redirected by both.
  assert.equal(
    await rawHttp(rPort, get('/a', 'example.com')),
    'HTTP/1.1 301 Moved Permanently\r\nLocation: https://example.com/a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
  );

  // The option on RampartProxy; a listener that is not mode 'http' refuses it.
  const optPort = await h.freePort();
  const opted = new RampartProxy({ listeners: [{ host: '127.0.0.1', port: optPort, mode: 'http', redirectUnknownHosts: true }], routes });
  await opted.start();
  t.after(() => opted.stop());
  assert.equal(
    await rawHttp(optPort, get('/b', 'stranger.example.net')),
    'HTTP/1.1 301 Moved Permanently\r\nLocation: https://stranger.example.net/b\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'
  );
  assert.deepEqual(
    h.errorsOf(() => new RampartProxy({ listeners: [{ host: '127.0.0.1', port: 443, redirectUnknownHosts: true }], routes: [] })),
    [{ path: 'listeners[0].redirectUnknownHosts', message: "has no use on a mode 'tls' listener (it redirects plain HTTP); leave it out" }]
  );
  // SymphonyProxy keeps a listener's own choice.
  const offPort = await h.freePort();
  const off = new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: offPort, mode: 'http', redirectUnknownHosts: false }], routes });
  await off.start();
  t.after(() => off.stop());
  assert.equal(await rawHttp(offPort, get('/c', 'stranger.example.net')), NOT_FOUND);
});

test('SymphonyProxy: symphonyRouteRules may only be true (the rules are what it is); anything else is a ConfigError at that path', async () => {
  const port = await h.freePort();
  const base = { listeners: [{ host: '127.0.0.1', port }], routes: [] };
  new SymphonyProxy({ ...base, symphonyRouteRules: true });
  for (const [value, shown] of [
    [false, 'false'],
    ['yes', '"yes"'],
    [null, 'null'],
    [Number.NaN, 'NaN'],
  ]) {
    assert.throws(
      () => new SymphonyProxy({ ...base, symphonyRouteRules: value }),
      (e) =>
        e instanceof ConfigError &&
        e.errors.length === 1 &&
        e.errors[0].path === 'symphonyRouteRules' &&
        e.errors[0].message === `SymphonyProxy always applies Symphony's route rules (true or left out), got ${shown}`,
      `symphonyRouteRules: ${String(value)}`
    );
  }
});
