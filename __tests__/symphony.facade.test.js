'use strict';
// SymphonyProxy (docs/symphony.md): Symphony's class on Rampart's engine. metrics() in Symphony's
// exact shape and reason names, its events, its route-identity errors, resolveConnection errors
// as 'error', stop(ms), the PROXY v1 default of UDS upstreams. Real node:tls clients, real
// TCP/UDS origins.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const net = require('node:net');
const tls = require('node:tls');
const path = require('node:path');
const { SymphonyProxy, RampartProxy, ConfigError } = require('..');
const h = require('./helpers');

const BLOCK_REASONS = [
  'max_connections',
  'cidr_blocked',
  'ja3_blocked',
  'ja4_blocked',
  'incomplete_handshake',
  'no_sni',
  'rate_limited',
  'too_many_connections',
  'penalty_boxed',
  // Rampart's others, in the engine's order
  'cluster_rate_limited',
  'dynamic_blocked',
  'h2_flood',
  'handshake_timeout',
  'listener_overloaded',
  'prefix_rate_limited',
  'prefix_too_many_connections',
  'request_rate_limited',
  'slow_handshake',
  'slow_request',
  'upstream_overloaded',
];
const ERROR_REASONS = [
  'no_route',
  'route_rate_limited',
  'suspend_unresolved',
  'tls_handshake',
  'tls_missing_cert',
  'upstream_connect',
  'idle_timeout',
  'stream',
  'http_header',
  'half_closed',
  // Rampart's others
  'accept_failed',
  'client_closed',
  'h2_protocol_error',
  'no_upstream_for_alpn',
  'proxy_header_invalid',
  'suspend_queue_full',
  'upstream_protocol_mismatch',
];
const zeros = (names, counts = {}) => names.map((reason) => ({ reason, count: counts[reason] || 0 }));

function idleListener(address, mode) {
  return {
    address,
    mode,
    activeConnections: 0,
    accepted: 0,
    blocked: 0,
    errors: 0,
    bytesReceived: 0,
    bytesSent: 0,
    halfClosedConnections: 0,
    blockedByReason: zeros(BLOCK_REASONS),
    errorsByReason: zeros(ERROR_REASONS),
  };
}

function idleRoute(route, metricsGroup) {
  const r = { route };
  if (metricsGroup !== undefined) r.metricsGroup = metricsGroup;
  return { ...r, activeConnections: 0, connections: 0, errors: 0, bytesReceived: 0, bytesSent: 0, errorsByReason: [] };
}

/** A unix socket path in a fresh temp directory. */
function socketPath(name) {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-sym-')), name);
}

/** A TLS client that records its end: `closed` resolves when the socket closes. */
function holdOpen(port, servername) {
  const sock = tls.connect({ port, host: '127.0.0.1', servername, rejectUnauthorized: false });
  sock.on('error', () => {});
  const closed = new Promise((r) => sock.once('close', r));
  return { sock, closed };
}

test('metrics(): Symphony shape, exact, on an idle proxy and after traffic; reasons renamed and summed', async (t) => {
  const cert = h.selfSigned(['localhost', 'dead.test']);
  const echo = await h.echoServer();
  const [tlsPort, httpPort] = await h.freePorts(2);
  const dead = socketPath('missing.sock');
  const proxy = new SymphonyProxy({
    listeners: [
      { host: '127.0.0.1', port: tlsPort },
      { host: '127.0.0.1', port: httpPort, mode: 'http' },
    ],
    routes: [
      { sni: 'localhost', metricsGroup: 'tenant-1', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }], terminateTls: true, cert },
      { sni: 'dead.test', upstreams: [{ kind: 'uds', path: dead }], terminateTls: true, cert },
    ],
  });
  const connectionErrors = [];
  const errors = [];
  proxy.on('connectionError', (e) => connectionErrors.push(e));
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });

  assert.deepEqual(proxy.metrics(), {
    activeConnections: 0,
    blockedConnections: 0,
    pendingSuspended: 0,
    suspendedResolved: 0,
    suspendedUnresolved: 0,
    halfClosedConnections: 0,
    routes: 2,
    failingRoutes: 0,
    listeners: [idleListener(`127.0.0.1:${tlsPort}`, 'tls'), idleListener(`127.0.0.1:${httpPort}`, 'http')],
    routeMetrics: [idleRoute('localhost', 'tenant-1'), idleRoute('dead.test')],
  });

  // 4096 bytes each way on the terminated route: plaintext counted, no handshake bytes.
  const payload = Buffer.alloc(4096, 'x');
  assert.equal((await h.tlsRoundTrip({ port: tlsPort, servername: 'localhost', payload })).data.length, 4096);
  // An unreachable UDS upstream: Symphony's upstream_connect, on the route and the listener.
  await assert.rejects(h.tlsRoundTrip({ port: tlsPort, servername: 'dead.test' }));
  // No route for the name: no_route, on the listener only.
  await assert.rejects(h.tlsRoundTrip({ port: tlsPort, servername: 'nope.test' }));
  await h.waitFor(() => proxy.metrics().listeners[0].errors === 2 && proxy.metrics().activeConnections === 0, { what: 'two errors counted' });

  const m = proxy.metrics();
  assert.deepEqual(m.listeners[0], {
    ...idleListener(`127.0.0.1:${tlsPort}`, 'tls'),
    accepted: 3,
    errors: 2,
    bytesReceived: 4096,
    bytesSent: 4096,
    errorsByReason: zeros(ERROR_REASONS, { no_route: 1, upstream_connect: 1 }),
  });
  assert.equal(
    m.listeners[0].errorsByReason.reduce((s, r) => s + r.count, 0),
    m.listeners[0].errors
  );
  assert.deepEqual(m.routeMetrics, [
    { ...idleRoute('localhost', 'tenant-1'), connections: 1, bytesReceived: 4096, bytesSent: 4096 },
    { ...idleRoute('dead.test'), connections: 1, errors: 1, errorsByReason: [{ reason: 'upstream_connect', count: 1 }] },
  ]);
  // A per-connection failure the engine reports with a message is a 'connectionError' event
  // (Symphony's name), never 'error' (no_route is counted only).
  assert.deepEqual(
    connectionErrors.map((e) => [e.reason, e.ip, e.listener]),
    [['upstream_connect', '127.0.0.1', `127.0.0.1:${tlsPort}`]]
  );
  assert.match(connectionErrors[0].message, /missing\.sock/);
  assert.deepEqual(errors, []);
  // The engine's own shape stays reachable.
  assert.equal(proxy.rampartMetrics().listeners[0].errorsByReason.upstream_connect_failed, 1);
  assert.ok(proxy instanceof RampartProxy);
});

test("'blocked' carries Symphony's fields; blockedIps() Symphony's lists (and Rampart's dynamicBlocklist)", async (t) => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']), protection: { blocklist: ['127.0.0.0/8'] } }],
    routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] }],
  });
  const blocked = [];
  proxy.on('blocked', (e) => blocked.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  await assert.rejects(h.tlsRoundTrip({ port, servername: 'localhost' }));
  await h.waitFor(() => blocked.length === 1, { what: "one 'blocked' event" });
  assert.deepEqual(blocked[0], { ip: '127.0.0.1', reason: 'cidr_blocked', listener: `127.0.0.1:${port}`, ja3: '', ja4: '' });
  assert.deepEqual(proxy.blockedIps(), { rateLimited: [], concurrencyLimited: [], cidrBlocklist: ['127.0.0.0/8'], penaltyBoxed: [], dynamicBlocklist: [] });
  const l = proxy.metrics().listeners[0];
  assert.deepEqual(l.blockedByReason, zeros(BLOCK_REASONS, { cidr_blocked: 1 }));
  assert.equal(proxy.metrics().blockedConnections, 1);
});

test("route identity limits: Symphony's words, at construction and in updateConfig (nothing applied)", async () => {
  const base = (route) => ({
    listeners: [{ host: '127.0.0.1', port: 443 }],
    routes: [{ sni: 'tenant.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }], terminateTls: false, ...route }],
  });
  assert.deepEqual(
    h.errorsOf(() => new SymphonyProxy(base({ metricsGroup: 'x'.repeat(129) }))),
    [{ path: 'routes[0].metricsGroup', message: 'metricsGroup exceeds 128 UTF-8 bytes' }]
  );
  assert.throws(() => new SymphonyProxy(base({ metricsGroup: 'tenant\rbreak' })), /metricsGroup must not contain control characters/);
  assert.throws(() => new SymphonyProxy(base({ sni: 'x'.repeat(256) })), /route SNI exceeds 255 UTF-8 bytes/);
  assert.throws(() => new SymphonyProxy(base({ sni: 'tenant\ttest' })), /route SNI must not contain control characters/);
  // 128 bytes of two-byte characters is 64 characters: the limit is in UTF-8 bytes.
  assert.deepEqual(
    h.errorsOf(() => new SymphonyProxy(base({ metricsGroup: 'é'.repeat(65) }))),
    [{ path: 'routes[0].metricsGroup', message: 'metricsGroup exceeds 128 UTF-8 bytes' }]
  );
  const proxy = new SymphonyProxy(base({ metricsGroup: 'é'.repeat(64) }));
  assert.throws(() => proxy.updateConfig({ routes: [{ ...base({}).routes[0], sni: 'a\u0000b' }] }), ConfigError);
  // A protection update for a port with no listener: Symphony's words; the routes given with it are not applied.
  assert.deepEqual(
    h.errorsOf(() => proxy.updateConfig({ routes: [], protection: [{ port: 9999, protection: {} }] })),
    [{ path: 'protection[0].port', message: 'port 9999 matches no listener; listeners: 443' }]
  );
  assert.deepEqual(
    proxy.metrics().routeMetrics.map((r) => [r.route, r.metricsGroup]),
    [['tenant.test', 'é'.repeat(64)]]
  );
});

test("resolveConnection: a route that cannot be built closes the connection and emits 'error'; suspended counts", async (t) => {
  const cert = h.selfSigned(['a.hold.test', 'b.hold.test', 'c.hold.test']);
  const echo = await h.echoServer();
  const port = await h.freePort();
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port }],
    routes: [{ sni: '*.hold.test', suspended: true, upstreams: [], terminateTls: true }],
  });
  const suspended = [];
  const errors = [];
  proxy.on('suspended', (e) => suspended.push(e));
  proxy.on('error', (err, ctx) => errors.push({ err, ctx }));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });

  // A bad route (port 0): the held connection takes the decision (true: the engine closes it),
  // 'error' names the problem and the listener. Never a throw.
  const bad = holdOpen(port, 'a.hold.test');
  await h.waitFor(() => suspended.length === 1, { what: "first 'suspended'" });
  assert.deepEqual(Object.keys(suspended[0]).sort(), ['id', 'listener', 'peerIp', 'peerPort', 'sni']);
  assert.equal(proxy.resolveConnection(suspended[0].id, { upstream: { kind: 'tcp', host: '127.0.0.1', port: 0 }, terminateTls: true, cert }), true);
  await bad.closed;
  await h.waitFor(() => errors.length === 1, { what: "one 'error'" });
  assert.ok(errors[0].err instanceof ConfigError);
  assert.equal(errors[0].err.code, 'resolve_route_invalid');
  // The engine's `errors` (no message parsing), in Symphony's words.
  assert.deepEqual(errors[0].err.errors, [{ path: 'route.upstream.port', message: 'must be an integer in [1, 65535], got 0' }]);
  assert.match(errors[0].err.message, new RegExp(`^resolveConnection\\(${suspended[0].id}\\): .*route\\.upstream\\.port: `));
  assert.deepEqual(errors[0].ctx, { listener: `127.0.0.1:${port}` });
  // A decided id is gone: a second decision is a no-op.
  assert.equal(proxy.resolveConnection(suspended[0].id, null), false);

  // Left out: rejected (Symphony's resolveConnection(id) closes).
  const rejected = holdOpen(port, 'b.hold.test');
  await h.waitFor(() => suspended.length === 2, { what: "second 'suspended'" });
  assert.equal(proxy.resolveConnection(suspended[1].id), true);
  await rejected.closed;

  // A good route: served.
  const served = tls.connect({ port, host: '127.0.0.1', servername: 'c.hold.test', rejectUnauthorized: false });
  served.on('error', () => {});
  await h.waitFor(() => suspended.length === 3, { what: "third 'suspended'" });
  assert.equal(
    proxy.resolveConnection(suspended[2].id, { upstream: { kind: 'tcp', host: '127.0.0.1', port: echo.address().port }, terminateTls: true, cert }),
    true
  );
  await new Promise((r) => served.once('secureConnect', r));
  served.write('hi');
  await new Promise((r) => served.once('data', r));
  served.destroy();

  await h.waitFor(() => proxy.metrics().suspendedUnresolved === 2, { what: 'two unresolved' });
  const m = proxy.metrics();
  assert.deepEqual([m.pendingSuspended, m.suspendedResolved, m.suspendedUnresolved], [0, 1, 2]);
  assert.deepEqual(
    m.listeners[0].errorsByReason.find((r) => r.reason === 'suspend_unresolved'),
    { reason: 'suspend_unresolved', count: 2 }
  );
});

test('stop(ms) drains for ms, then closes; start() twice binds once; ready and close once each', async () => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }],
    routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] }],
  });
  const seen = [];
  proxy.on('ready', () => seen.push('ready'));
  proxy.on('close', () => seen.push('close'));
  await proxy.start();
  await proxy.start();
  const held = holdOpen(port, 'localhost');
  await new Promise((r) => held.sock.once('secureConnect', r));
  await h.waitFor(() => proxy.metrics().activeConnections === 1, { what: 'one active connection' });
  const t0 = Date.now();
  await proxy.stop(600);
  const took = Date.now() - t0;
  await held.closed;
  assert.ok(took >= 600, `stop(600) resolved after ${took} ms`);
  assert.ok(took < 3000, `stop(600) resolved after ${took} ms`);
  assert.deepEqual(seen, ['ready', 'close']);
  await h.closeServer(echo);
});

test('a route whose upstreams are all UDS sends a PROXY v1 header (Symphony default); TCP sends none', async (t) => {
  const udsPath = socketPath('up.sock');
  const uds = net.createServer();
  const got = [];
  uds.on('connection', (s) => {
    const e = { data: Buffer.alloc(0) };
    got.push(e);
    s.on('data', (d) => {
      e.data = Buffer.concat([e.data, d]);
      s.write(d);
    });
    s.on('error', () => {});
  });
  await new Promise((r) => uds.listen(udsPath, r));
  const tcp = await h.captureServer({ reply: 'ok' });
  const port = await h.freePort();
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['uds.test', 'tcp.test']) }],
    routes: [
      { sni: 'uds.test', terminateTls: true, upstreams: [{ kind: 'uds', path: udsPath }] },
      { sni: 'tcp.test', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: tcp.address().port }] },
    ],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await new Promise((r) => uds.close(r));
    await h.closeServer(tcp);
  });
  const sock = tls.connect({ port, host: '127.0.0.1', servername: 'uds.test', rejectUnauthorized: false });
  await new Promise((r) => sock.once('secureConnect', r));
  sock.write('hello');
  await h.waitFor(() => got.length === 1 && got[0].data.includes('hello'), { what: 'bytes at the UDS upstream' });
  const expected = `PROXY TCP4 127.0.0.1 127.0.0.1 ${sock.localPort} ${port}\r\nhello`;
  assert.equal(got[0].data.toString(), expected);
  sock.destroy();
  assert.equal((await h.tlsRoundTrip({ port, servername: 'tcp.test', payload: Buffer.from('plain'), expect: 2 })).data.toString(), 'ok');
  await h.waitFor(() => tcp.captured.length === 1 && tcp.captured[0].data.length === 5, { what: 'bytes at the TCP upstream' });
  assert.equal(tcp.captured[0].data.toString(), 'plain');
});

test('forwardFingerprint on a passthrough route without PROXY v2: refused, in Symphony\'s words ("no carrier")', async (t) => {
  const upstream = { kind: 'tcp', host: '127.0.0.1', port: 1 };
  const passthrough = { sni: 'localhost', terminateTls: false, forwardFingerprint: 'ja3', upstreams: [upstream] };
  const noCarrier =
    "no carrier for the fingerprint header: it sets HTTP request headers and needs terminateTls: true (or sourceAddressHeader: 'proxyProtocolV2', where the fingerprint rides a PROXY v2 TLV)";
  // The only route: nothing would serve, the constructor throws.
  assert.deepEqual(
    h.errorsOf(() => new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: 443 }], routes: [passthrough] })),
    [{ path: 'routes[0].forwardFingerprint', message: noCarrier }]
  );
  // Beside a good route (route isolation): left out, 'error' route_failed with the same words.
  const port = await h.freePort();
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port }],
    routes: [{ sni: 'held.test', terminateTls: false, suspended: true, upstreams: [] }, passthrough],
  });
  const errors = [];
  const suspended = [];
  proxy.on('error', (err, ctx) => errors.push({ err, ctx }));
  proxy.on('suspended', (e) => suspended.push(e));
  await proxy.start();
  t.after(() => proxy.stop());
  await h.waitFor(() => errors.length === 1, { what: "'error' route_failed" });
  assert.ok(errors[0].err instanceof ConfigError);
  assert.deepEqual([errors[0].err.code, errors[0].err.route, errors[0].err.index, errors[0].err.lastGoodCert], ['route_failed', 'localhost', 1, false]);
  assert.deepEqual(errors[0].err.errors, [{ path: 'routes[1].forwardFingerprint', message: noCarrier }]);
  assert.ok(errors[0].err.message.endsWith(`routes[1].forwardFingerprint: ${noCarrier}`), errors[0].err.message);
  assert.deepEqual(errors[0].ctx, {});
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes], [1, 1]);
  // In resolveConnection: no throw; the held connection is closed and 'error' has the same words.
  const held = holdOpen(port, 'held.test');
  await h.waitFor(() => suspended.length === 1, { what: "'suspended'" });
  assert.equal(proxy.resolveConnection(suspended[0].id, { upstream, terminateTls: false, forwardFingerprint: 'ja3' }), true);
  await held.closed;
  await h.waitFor(() => errors.length === 2, { what: "'error' resolve_route_invalid" });
  assert.equal(errors[1].err.code, 'resolve_route_invalid');
  assert.deepEqual(errors[1].err.errors, [{ path: 'route.forwardFingerprint', message: noCarrier }]);
  assert.ok(errors[1].err.message.endsWith(`route.forwardFingerprint: ${noCarrier}`), errors[1].err.message);
  assert.deepEqual(errors[1].ctx, { listener: `127.0.0.1:${port}` });
  await h.waitFor(() => proxy.metrics().suspendedUnresolved === 1, { what: 'one unresolved' });
  assert.deepEqual([proxy.metrics().suspendedResolved, proxy.metrics().pendingSuspended], [0, 0]);
  // An id no connection holds (expired, or never issued): false, and what needs no listener is
  // checked (checkResolveRoute; a listener's defaultCert is the held connection's to give): the
  // missing carrier is one, reported as for a held connection, with no listener to name.
  assert.equal(proxy.resolveConnection('999999', { upstream, terminateTls: false, forwardFingerprint: 'ja3' }), false);
  assert.equal(errors.length, 3);
  assert.equal(errors[2].err.code, 'resolve_route_invalid');
  assert.deepEqual(errors[2].err.errors, [{ path: 'route.forwardFingerprint', message: noCarrier }]);
  assert.deepEqual(errors[2].ctx, {});
  // A field's own value is checked too, in Symphony's words.
  assert.equal(proxy.resolveConnection('999999', { upstream, terminateTls: false, halfCloseTimeoutMs: -1 }), false);
  assert.equal(errors.length, 4);
  assert.equal(errors[3].err.code, 'resolve_route_invalid');
  assert.deepEqual(
    errors[3].err.errors.map((x) => x.path),
    ['route.halfCloseTimeoutMs']
  );
  // A route valid without a listener: nothing to report.
  assert.equal(proxy.resolveConnection('999999', { upstream, terminateTls: false }), false);
  assert.equal(errors.length, 4);
  assert.equal(proxy.metrics().suspendedUnresolved, 1);
});

test("xForwardedFor with http2, and header carriers without protocol: 'http': refused as Symphony refuses them (constructor, updateConfig, resolveConnection's 'error')", async () => {
  const route = {
    sni: 'a.test',
    terminateTls: true,
    protocol: 'http',
    http2: true,
    sourceAddressHeader: 'xForwardedFor',
    upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }],
  };
  const message = "http2 cannot be combined with sourceAddressHeader: 'xForwardedFor' (header injection would corrupt h2 frames; use 'proxyProtocol')";
  const listeners = [{ host: '127.0.0.1', port: 443, defaultCert: h.selfSigned(['a.test']) }];
  // The constructor, as Symphony's: the route fails to build and is left out (reported), even
  // when it is the only one, and even without protocol: 'http' (its build fails first).
  for (const only of [route, { ...route, protocol: undefined }]) {
    const alone = new SymphonyProxy({ listeners, routes: [only] });
    const failed = [];
    alone.on('error', (err) => failed.push(err));
    await h.waitFor(() => failed.length === 1, { what: "'error' route_failed" });
    const expected = [{ path: 'routes[0].http2', message }];
    if (only.protocol === undefined) {
      expected.push({
        path: 'routes[0].protocol',
        message: "sourceAddressHeader: 'xForwardedFor' rewrites HTTP request headers: declare protocol: 'http' on the route",
      });
    }
    assert.deepEqual([failed[0].code, failed[0].route, failed[0].index, failed[0].errors], ['route_failed', 'a.test', 0, expected]);
    assert.deepEqual([alone.metrics().routes, alone.metrics().failingRoutes], [0, 1]);
  }
  const proxy = new SymphonyProxy({ listeners, routes: [] });
  assert.deepEqual(
    h.errorsOf(() => proxy.updateConfig({ routes: [route] })),
    [{ path: 'routes[0].http2', message }]
  );
  const errors = [];
  proxy.on('error', (err) => errors.push(err.errors));
  const { sni: _sni, upstreams, ...rest } = route;
  assert.equal(proxy.resolveConnection('7', { ...rest, upstream: upstreams[0] }), false);
  assert.deepEqual(errors, [[{ path: 'route.http2', message }]]);
  // Header rewriting needs the route to declare HTTP.
  const undeclared = {
    sni: 'a.test',
    terminateTls: true,
    sourceAddressHeader: 'xForwardedFor',
    forwardFingerprint: 'ja3',
    upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }],
  };
  assert.deepEqual(
    h.errorsOf(() => new SymphonyProxy({ listeners, routes: [undeclared] })),
    [{ path: 'routes[0].protocol', message: "sourceAddressHeader: 'xForwardedFor' rewrites HTTP request headers: declare protocol: 'http' on the route" }]
  );
  assert.deepEqual(
    h.errorsOf(() => new SymphonyProxy({ listeners, routes: [{ ...undeclared, sourceAddressHeader: 'none' }] })),
    [{ path: 'routes[0].protocol', message: "forwardFingerprint rewrites HTTP request headers: declare protocol: 'http' on the route" }]
  );
  // With PROXY v2 the fingerprint rides a TLV: no declaration needed.
  assert.ok(new SymphonyProxy({ listeners, routes: [{ ...undeclared, sourceAddressHeader: 'proxyProtocolV2' }] }));
});

test('xForwardedFor with http2 beside routes that serve: that route alone is left out and reported, as Symphony drops it', async (t) => {
  const echo = await h.echoServer();
  const upstreams = [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }];
  const message = "http2 cannot be combined with sourceAddressHeader: 'xForwardedFor' (header injection would corrupt h2 frames; use 'proxyProtocol')";
  const port = await h.freePort();
  const listeners = [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['a.test', 'b.test', 'c.test']) }];
  const good = { sni: 'a.test', terminateTls: true, upstreams };
  const conflict = { sni: 'b.test', terminateTls: true, protocol: 'http', http2: true, sourceAddressHeader: 'xForwardedFor', upstreams };
  // A route the engine fails to build (a key that is not the certificate's), after it: its index
  // is the config's, not the engine's.
  const mismatch = {
    sni: 'c.test',
    terminateTls: true,
    upstreams,
    cert: { certChain: h.selfSigned(['c.test']).certChain, privateKey: h.selfSigned(['c.test']).privateKey },
  };
  const proxy = new SymphonyProxy({ listeners, routes: [good, conflict, mismatch] });
  const failed = [];
  proxy.on('error', (err) => failed.push(err));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  await h.waitFor(() => failed.length === 2, { what: "two 'error' route_failed" });
  const pick = (e) => ({ code: e.code, route: e.route, index: e.index, errors: e.errors, lastGoodCert: e.lastGoodCert });
  const [conflictErr, mismatchErr] = [...failed].sort((x, y) => x.index - y.index);
  assert.deepEqual(pick(conflictErr), { code: 'route_failed', route: 'b.test', index: 1, errors: [{ path: 'routes[1].http2', message }], lastGoodCert: false });
  assert.equal(conflictErr.message, `route "b.test" (routes[1]) failed to build and is not served; the other routes are: routes[1].http2: ${message}`);
  assert.deepEqual(pick(mismatchErr), {
    code: 'route_failed',
    route: 'c.test',
    index: 2,
    errors: [{ path: 'routes[2].cert', message: 'privateKey does not match the first certificate of certChain: keys may not be consistent: KeyMismatch' }],
    lastGoodCert: false,
  });
  assert.ok(mismatchErr.message.startsWith('route "c.test" (routes[2]) failed to build'), mismatchErr.message);
  assert.equal(proxy.metrics().failingRoutes, 2);
  assert.deepEqual(
    proxy.rampartMetrics().routeFailures,
    [pick(conflictErr), pick(mismatchErr)].map(({ code: _c, ...f }) => f)
  );
  assert.equal(proxy.rampartMetrics().failingRoutes, 2);
  // The other route serves; the one left out has no route.
  assert.equal((await h.tlsRoundTrip({ port, servername: 'a.test', payload: Buffer.from('hi') })).data.toString(), 'hi');
  await assert.rejects(h.tlsRoundTrip({ port, servername: 'b.test', payload: Buffer.from('hi') }), { code: 'ECONNRESET' });
  await h.waitFor(() => proxy.metrics().listeners[0].errorsByReason.find((r) => r.reason === 'no_route').count === 1, { what: 'no_route' });

  // updateConfig: the same, once per call.
  proxy.updateConfig({ routes: [conflict, good] });
  await h.waitFor(() => failed.length === 3, { what: "the update's 'error'" });
  assert.deepEqual(pick(failed[2]), { code: 'route_failed', route: 'b.test', index: 0, errors: [{ path: 'routes[0].http2', message }], lastGoodCert: false });
  assert.equal(proxy.metrics().failingRoutes, 1);
  assert.equal((await h.tlsRoundTrip({ port, servername: 'a.test', payload: Buffer.from('ok') })).data.toString(), 'ok');
  // With isolateRoutes: false, or when no route would serve, the config fails whole.
  assert.deepEqual(
    h.errorsOf(() => new SymphonyProxy({ listeners, isolateRoutes: false, routes: [good, conflict] })),
    [{ path: 'routes[1].http2', message }]
  );
  assert.deepEqual(
    h.errorsOf(() => proxy.updateConfig({ routes: [conflict] })),
    [{ path: 'routes[0].http2', message }]
  );
  assert.equal(proxy.metrics().failingRoutes, 1);
  assert.equal(failed.length, 3);
});

test("tcpKeepalive and halfCloseTimeoutMs errors carry Symphony's words", () => {
  const build = (extra) => new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: 443 }], routes: [], ...extra });
  assert.deepEqual(
    h.errorsOf(() => build({ tcpKeepalive: { idleMs: 500, retries: 128 }, halfCloseTimeoutMs: 0.5 })),
    [
      { path: 'tcpKeepalive.idleMs', message: 'idleMs must be a number of ms (whole seconds, at least 1000): must be an integer in [1000, 32767000], got 500' },
      { path: 'tcpKeepalive.retries', message: 'retries must be in [1, 127], an integer, got 128' },
      { path: 'halfCloseTimeoutMs', message: 'halfCloseTimeoutMs must be a number of ms (0 = none): must be an integer in [0, 2^53-1], got 0.5' },
    ]
  );
});

test('port: 0 takes a port the kernel picks at start; the routes and protection set before start apply', async (t) => {
  const echo = await h.echoServer();
  const proxy = new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: 0, defaultCert: h.selfSigned(['localhost']) }], routes: [] });
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  assert.equal(proxy.metrics().listeners[0].address, '127.0.0.1:0');
  proxy.updateConfig({
    routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] }],
    protection: [{ port: 0, protection: { blocklist: ['192.0.2.0/24'] } }],
  });
  await proxy.start();
  const address = proxy.metrics().listeners[0].address;
  const port = Number(address.slice('127.0.0.1:'.length));
  assert.ok(port > 0 && port < 65536, address);
  assert.deepEqual(proxy.blockedIps().cidrBlocklist, ['192.0.2.0/24']);
  assert.equal((await h.tlsRoundTrip({ port, servername: 'localhost', payload: Buffer.from('zero') })).data.toString(), 'zero');
  // Protection by port 0 still names that listener after start.
  proxy.updateConfig({ protection: [{ port: 0, protection: { blocklist: ['198.51.100.0/24'] } }] });
  assert.deepEqual(proxy.blockedIps().cidrBlocklist, ['198.51.100.0/24']);
});

test("port: 0 with a route that fails to build: one 'error' route_failed (the engine rebuilt at start does not report it again)", async (t) => {
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port: 0, defaultCert: h.selfSigned(['a.test']), protection: { blocklist: ['127.0.0.0/8'] } }],
    routes: [
      { sni: 'a.test', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] },
      { sni: 'b.test', terminateTls: false, forwardFingerprint: 'ja3', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] },
    ],
  });
  const seen = [];
  proxy.on('error', (err) => seen.push(`${err.code} ${err.route}`));
  proxy.on('blocked', (e) => seen.push(`blocked ${e.reason}`));
  await proxy.start();
  t.after(() => proxy.stop());
  // A 'blocked' from the started engine comes after anything its rebuild reported.
  const port = Number(proxy.metrics().listeners[0].address.split(':')[1]);
  await assert.rejects(h.tlsRoundTrip({ port, servername: 'a.test' }));
  await h.waitFor(() => seen.includes('blocked cidr_blocked'), { what: "'blocked'" });
  assert.deepEqual(seen, ['route_failed b.test', 'blocked cidr_blocked']);
  assert.equal(proxy.metrics().failingRoutes, 1);
});

test("fingerprint blocklist entries: Symphony's 'invalid ja3Blocklist/ja4Blocklist entry' words", () => {
  const build = (protection) => new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: 0, protection }], routes: [] });
  assert.deepEqual(
    h.errorsOf(() => build({ ja3Blocklist: ['deadbeef'] })),
    [{ path: 'listeners[0].protection.ja3Blocklist[0]', message: 'invalid ja3Blocklist entry: must be 32 hex characters (a JA3 MD5), got "deadbeef"' }]
  );
  assert.match(h.errorsOf(() => build({ ja4Blocklist: ['not-a-ja4'] }))[0].message, /^invalid ja4Blocklist entry: must be a JA4 fingerprint/);
});

test("Harper's shape end to end (docs/symphony.md): UDS workers behind PROXY v1, optional mTLS, a suspended app resolved to its socket", async (t) => {
  if (!h.needTool(t, 'openssl')) return;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-harper-'));
  const worker = (name) => {
    const got = { name, data: Buffer.alloc(0) };
    const server = net.createServer((s) => {
      s.on('data', (d) => {
        got.data = Buffer.concat([got.data, d]);
        if (got.data.includes('\r\n\r\n')) s.end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok');
      });
      s.on('error', () => {});
    });
    return new Promise((r) => server.listen(path.join(dir, `${name}.sock`), () => r({ server, got, path: path.join(dir, `${name}.sock`) })));
  };
  const [w1, app] = [await worker('worker-1'), await worker('app')];
  const pki = h.opensslChain('harper.test');
  const appPki = h.opensslChain('*.apps.test');
  const cert = (c) => ({ certChain: c.certChain, privateKey: c.privateKey });
  const clientCa = h.opensslChain('client-ca.test').ca;
  const port = await h.freePort();
  const proxy = new SymphonyProxy({
    listeners: [{ host: '127.0.0.1', port }],
    routes: [
      { sni: 'harper.test', terminateTls: true, cert: cert(pki), mtls: { clientCaCert: clientCa }, upstreams: [{ kind: 'uds', path: w1.path }] },
      { sni: '*.apps.test', terminateTls: true, suspended: true, upstreams: [] },
    ],
  });
  proxy.on('suspended', (e) => proxy.resolveConnection(e.id, { upstream: { kind: 'uds', path: app.path }, terminateTls: true, cert: cert(appPki) }));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    for (const w of [w1, app]) await new Promise((r) => w.server.close(r));
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const get = (servername, ca) =>
    new Promise((resolve, reject) => {
      const s = tls.connect({ port, host: '127.0.0.1', servername, ca }, () => s.write(`GET / HTTP/1.1\r\nHost: ${servername}\r\n\r\n`));
      let body = '';
      s.on('data', (d) => (body += d));
      s.on('end', () => resolve({ body, localPort: s.localPort }));
      s.on('error', reject);
    });
  const direct = await get('harper.test', pki.ca);
  assert.match(direct.body, /\r\n\r\nok$/);
  assert.equal(w1.got.data.toString(), `PROXY TCP4 127.0.0.1 127.0.0.1 ${direct.localPort} ${port}\r\nGET / HTTP/1.1\r\nHost: harper.test\r\n\r\n`);
  const held = await get('one.apps.test', appPki.ca);
  assert.match(held.body, /\r\n\r\nok$/);
  assert.equal(app.got.data.toString(), `PROXY TCP4 127.0.0.1 127.0.0.1 ${held.localPort} ${port}\r\nGET / HTTP/1.1\r\nHost: one.apps.test\r\n\r\n`);
  assert.deepEqual([proxy.metrics().suspendedResolved, proxy.metrics().suspendedUnresolved], [1, 0]);
});
