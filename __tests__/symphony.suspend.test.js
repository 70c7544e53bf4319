'use strict';
// Symphony drop-in, suspended routes (docs/proxy.md: Suspended routes): a connection whose ClientHello
// matches a `suspended: true` route is held and offered to JS as a 'suspended' event; JS decides
// with resolveConnection(id, route | null). Real node:tls clients, a real TCP origin.
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const { RampartProxy, SymphonyProxy, ConfigError } = require('..');
const h = require('./helpers');

/**
 * A node:tls client that records what happens: `secure` (handshake done), `closedAt`
 * (Date.now() at close), `error`; `data` collects what it reads.
 */
function client(port, servername, { ca } = {}) {
  const sock = tls.connect({ port, host: '127.0.0.1', servername, ca, rejectUnauthorized: Boolean(ca) });
  const c = { sock, secure: false, closedAt: null, error: null, data: Buffer.alloc(0) };
  sock.on('secureConnect', () => (c.secure = true));
  sock.on('data', (d) => (c.data = Buffer.concat([c.data, d])));
  sock.on('error', (e) => (c.error = e));
  sock.on('close', () => (c.closedAt = Date.now()));
  c.connected = new Promise((r) => sock.once('connect', r));
  return c;
}

/** A started proxy whose only routes are suspended; `events` collects 'suspended' payloads. */
async function suspendedProxy({ listener = {}, routes } = {}) {
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, ...listener }],
    routes: routes || [
      { sni: '*.hold.test', suspended: true },
      { sni: '*.quick.test', suspended: true, suspendTimeoutMs: 400, upstreams: [] },
    ],
  });
  const events = [];
  proxy.on('suspended', (e) => events.push(e));
  await proxy.start();
  const errors = () => proxy.metrics().listeners[0].errorsByReason;
  return { proxy, port, events, errors, close: () => proxy.stop() };
}

/** Waits for the 'suspended' event of `sni` (the n-th one overall when several are expected). */
function eventFor(events, sni) {
  return h.waitFor(() => events.find((e) => e.sni === sni), { what: `'suspended' for ${sni}` });
}

test('suspend → resolve with a route and certificate chosen at connect time → round trip', async (t) => {
  const echo = await h.echoServer();
  const s = await suspendedProxy();
  t.after(async () => {
    await s.close();
    await h.closeServer(echo);
  });
  // The certificate is "provisioned" when the connection arrives: the listener has none.
  const cert = h.selfSigned(['app.hold.test']);
  s.proxy.on('suspended', (e) => {
    const took = s.proxy.resolveConnection(e.id, {
      upstream: { kind: 'tcp', host: '127.0.0.1', port: echo.address().port },
      terminateTls: true,
      cert,
    });
    assert.equal(took, true);
  });
  const c = client(s.port, 'app.hold.test', { ca: cert.certChain });
  await c.connected;
  await h.waitFor(() => c.secure || c.error, { what: 'handshake' });
  assert.equal(c.error, null);
  c.sock.write('through the resolved route');
  await h.waitFor(() => c.data.length >= 26, { what: 'echo' });
  assert.equal(c.data.toString(), 'through the resolved route');
  const ev = s.events[0];
  assert.deepEqual(Object.keys(ev).sort(), ['id', 'listener', 'peerIp', 'peerPort', 'sni']);
  assert.equal(typeof ev.id, 'string');
  assert.deepEqual(
    { sni: ev.sni, peerIp: ev.peerIp, peerPort: ev.peerPort, listener: ev.listener },
    { sni: 'app.hold.test', peerIp: '127.0.0.1', peerPort: c.sock.localPort, listener: `127.0.0.1:${s.port}` }
  );
  c.sock.end();
  await h.waitFor(() => c.closedAt, { what: 'close' });
  // The connection counts in the suspended route's metrics, with its bytes, and no error.
  const rm = await h.waitFor(
    () => {
      const r = s.proxy.metrics().routeMetrics.find((x) => x.route === '*.hold.test');
      return r.activeConnections === 0 && r;
    },
    { what: 'route closed' }
  );
  assert.equal(rm.connections, 1);
  assert.equal(rm.bytesReceived, 26);
  assert.equal(rm.bytesSent, 26);
  assert.equal(rm.errors, 0);
  // Already resolved: a second decision is a no-op.
  assert.equal(s.proxy.resolveConnection(ev.id, null), false);
});

test('suspend → resolve as passthrough: the untouched ClientHello reaches a TLS origin', async (t) => {
  const originCert = h.selfSigned(['pass.hold.test']);
  const origin = tls.createServer({ cert: originCert.certChain, key: originCert.privateKey }, (sock) => {
    sock.on('error', () => {});
    sock.end('from the TLS origin');
  });
  await h.listen(origin);
  const s = await suspendedProxy();
  t.after(async () => {
    await s.close();
    await h.closeServer(origin);
  });
  s.proxy.on('suspended', (e) => {
    s.proxy.resolveConnection(e.id, {
      upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: origin.address().port }],
      terminateTls: false,
    });
  });
  const c = client(s.port, 'pass.hold.test', { ca: originCert.certChain });
  await h.waitFor(() => c.closedAt, { what: 'origin answer and close' });
  assert.equal(c.error, null);
  assert.equal(c.secure, true);
  assert.equal(c.data.toString(), 'from the TLS origin');
});

test('suspend → null → the client sees the connection closed (suspend_rejected)', async (t) => {
  const s = await suspendedProxy();
  t.after(() => s.close());
  const before = s.errors().suspend_rejected;
  const c = client(s.port, 'no.hold.test');
  const ev = await eventFor(s.events, 'no.hold.test');
  assert.equal(s.proxy.resolveConnection(ev.id, null), true);
  await h.waitFor(() => c.closedAt, { what: 'client closed' });
  assert.equal(c.secure, false);
  await h.waitFor(() => s.errors().suspend_rejected === before + 1, { what: 'suspend_rejected' });
  assert.equal(s.proxy.metrics().routeMetrics.find((r) => r.route === '*.hold.test').errorsByReason.suspend_rejected, 1);
  assert.equal(s.proxy.resolveConnection(ev.id, null), false, 'a resolved id is a no-op');
});

test('suspend → timeout: closed after suspendTimeoutMs (suspend_timeout), then the id is expired', async (t) => {
  const echo = await h.echoServer();
  const s = await suspendedProxy();
  t.after(async () => {
    await s.close();
    await h.closeServer(echo);
  });
  const before = s.errors().suspend_timeout;
  const c = client(s.port, 'slow.quick.test');
  const ev = await eventFor(s.events, 'slow.quick.test');
  const heldAt = Date.now();
  await h.waitFor(() => c.closedAt, { what: 'timeout close', timeoutMs: 5000 });
  const waited = c.closedAt - heldAt;
  assert.ok(waited >= 350, `closed after ${waited} ms, suspendTimeoutMs is 400`);
  assert.ok(waited < 2000, `closed after ${waited} ms, suspendTimeoutMs is 400`);
  assert.equal(c.secure, false);
  await h.waitFor(() => s.errors().suspend_timeout === before + 1, { what: 'suspend_timeout' });
  const late = { upstream: { kind: 'tcp', host: '127.0.0.1', port: echo.address().port }, terminateTls: false };
  assert.equal(s.proxy.resolveConnection(ev.id, late), false, 'an expired id is a no-op');
  assert.equal(s.errors().suspend_timeout, before + 1);
});

test('unknown ids are a no-op', async (t) => {
  const s = await suspendedProxy();
  t.after(() => s.close());
  const before = JSON.stringify(s.proxy.metrics().listeners);
  assert.equal(s.proxy.resolveConnection('987654321', null), false);
  assert.equal(s.proxy.resolveConnection('not-an-id', null), false);
  assert.equal(s.proxy.resolveConnection('', { upstream: { kind: 'tcp', host: '127.0.0.1', port: 1 }, terminateTls: false }), false);
  assert.equal(JSON.stringify(s.proxy.metrics().listeners), before);
  assert.throws(
    () => s.proxy.resolveConnection(7, null),
    (e) => e instanceof ConfigError && e.errors[0].path === 'id'
  );
  assert.throws(
    () => s.proxy.resolveConnection('1'),
    (e) => e instanceof ConfigError && e.errors[0].path === 'route'
  );
});

test("SymphonyProxy: an id no 'suspended' event could carry is reported as 'error' invalid_connection_id (never thrown), as Symphony reports it", () => {
  const proxy = new SymphonyProxy({ listeners: [{ host: '127.0.0.1', port: 443 }], routes: [] });
  const errors = [];
  proxy.on('error', (err, ctx) => errors.push({ code: err.code, message: err.message, ctx }));
  const route = { upstream: { kind: 'tcp', host: '127.0.0.1', port: 1 }, terminateTls: true, protocol: 'opaque' };
  assert.equal(proxy.resolveConnection('not-a-real-id', route), false);
  assert.equal(proxy.resolveConnection('18446744073709551616', null), false); // 2^64
  assert.equal(proxy.resolveConnection('', null), false);
  const message = (id) => `invalid connection id ${JSON.stringify(id)}: an id is the decimal string of a 'suspended' event's id`;
  assert.deepEqual(errors, [
    { code: 'invalid_connection_id', message: message('not-a-real-id'), ctx: {} },
    { code: 'invalid_connection_id', message: message('18446744073709551616'), ctx: {} },
    { code: 'invalid_connection_id', message: message(''), ctx: {} },
  ]);
  // A well-formed id no connection holds: false, nothing emitted; not a string: a ConfigError.
  assert.equal(proxy.resolveConnection('18446744073709551615', null), false);
  assert.equal(errors.length, 3);
  assert.throws(
    () => proxy.resolveConnection(7, null),
    (e) => e instanceof ConfigError && e.errors[0].path === 'id'
  );
});

test('the client leaving while held expires its id (client_closed)', async (t) => {
  const s = await suspendedProxy();
  t.after(() => s.close());
  const before = s.errors().client_closed;
  const c = client(s.port, 'gone.hold.test');
  const ev = await eventFor(s.events, 'gone.hold.test');
  c.sock.destroy();
  await h.waitFor(() => s.errors().client_closed === before + 1, { what: 'client_closed' });
  assert.equal(s.proxy.resolveConnection(ev.id, null), false);
  assert.equal(s.errors().suspend_rejected, 0);
});

test('beyond maxPendingSuspended a connection is refused at once (suspend_queue_full, no event)', async (t) => {
  const s = await suspendedProxy({ listener: { maxPendingSuspended: 2 } });
  t.after(() => s.close());
  const a = client(s.port, 'a.hold.test');
  const b = client(s.port, 'b.hold.test');
  const ea = await eventFor(s.events, 'a.hold.test');
  const eb = await eventFor(s.events, 'b.hold.test');
  const over = client(s.port, 'c.hold.test');
  await h.waitFor(() => over.closedAt, { what: 'over-bound close' });
  assert.equal(s.errors().suspend_queue_full, 1);
  assert.equal(s.events.length, 2);
  assert.equal(s.proxy.metrics().listeners[0].pendingSuspended, 2);
  assert.equal(s.proxy.metrics().pendingSuspended, 2);
  assert.match(s.proxy.prometheus(), new RegExp(`rampart_pending_suspended\\{listener="127\\.0\\.0\\.1:${s.port}"\\} 2`));
  assert.equal(a.closedAt, null);
  assert.equal(b.closedAt, null);
  // A slot freed (null closes `a`) takes the next one.
  assert.equal(s.proxy.resolveConnection(ea.id, null), true);
  await h.waitFor(() => a.closedAt, { what: 'a closed' });
  const d = client(s.port, 'd.hold.test');
  const ed = await eventFor(s.events, 'd.hold.test');
  assert.equal(s.errors().suspend_queue_full, 1);
  for (const e of [eb, ed]) assert.equal(s.proxy.resolveConnection(e.id, null), true);
  await h.waitFor(() => b.closedAt && d.closedAt, { what: 'b, d closed' });
  assert.equal(s.errors().suspend_rejected, 3);
  assert.equal(s.proxy.metrics().pendingSuspended, 0);
});

test('an invalid route in resolveConnection closes the connection and emits an error naming each field (never throws)', async (t) => {
  const s = await suspendedProxy();
  const errors = [];
  s.proxy.on('error', (e) => errors.push(e));
  let rejections = 0;
  const onRejection = () => rejections++;
  process.on('unhandledRejection', onRejection);
  t.after(async () => {
    process.off('unhandledRejection', onRejection);
    await s.close();
  });
  // Decided in an async 'suspended' listener, as Harper does: nothing may reject.
  s.proxy.on('suspended', async (e) => {
    await new Promise((r) => setImmediate(r));
    const route =
      e.sni === 'bad.hold.test'
        ? {
            upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 70000 }],
            sourceAddressHeader: 'bogus',
            connectTimeoutMs: NaN,
            suspended: true,
            metricsGroup: 'x',
          }
        : { upstream: { kind: 'tcp', host: '127.0.0.1', port: 1 }, upstreams: [], terminateTls: false };
    assert.equal(s.proxy.resolveConnection(e.id, route), true);
  });
  const c = client(s.port, 'bad.hold.test');
  const ev = await eventFor(s.events, 'bad.hold.test');
  await h.waitFor(() => errors.length === 1 && c.closedAt, { what: "the 'error' event and the close" });
  // Every problem twice: as `errors` ({ path, message }, as a ConfigError's) and in the message.
  const problems = [
    { path: 'route.suspended', message: 'is a route-table field: a resolved connection cannot be suspended again' },
    { path: 'route.metricsGroup', message: "is a route-table field: the connection counts in the suspended route's routeMetrics" },
    { path: 'route.upstreams[0].port', message: 'must be an integer in [1, 65535], got 70000' },
    { path: 'route.sourceAddressHeader', message: "must be one of 'none', 'proxyProtocol', 'proxyProtocolV2', 'xForwardedFor', got \"bogus\"" },
    { path: 'route.connectTimeoutMs', message: 'must be an integer in [1, 2^53-1], got NaN' },
    { path: 'route.cert', message: `is required when terminateTls is true and a listener has no defaultCert (127.0.0.1:${s.port})` },
  ];
  assert.deepEqual(errors[0], {
    code: 'resolve_route_invalid',
    message: `resolveConnection(${ev.id}): the route is not valid, the connection is closed: ${problems.map((p) => `${p.path}: ${p.message}`).join('; ')}`,
    ip: '127.0.0.1',
    port: s.port,
    listener: `127.0.0.1:${s.port}`,
    errors: problems,
  });
  assert.equal(c.secure, false);
  const c2 = client(s.port, 'both.hold.test');
  await h.waitFor(() => errors.length === 2 && c2.closedAt, { what: 'the second error' });
  assert.equal(
    errors[1].message.split(': the route is not valid, the connection is closed: ')[1],
    'route.upstream: give either upstream (one) or upstreams, not both'
  );
  assert.deepEqual(errors[1].errors, [{ path: 'route.upstream', message: 'give either upstream (one) or upstreams, not both' }]);
  assert.equal(s.errors().resolve_route_invalid, 2);
  assert.equal(s.proxy.metrics().routeMetrics[0].errorsByReason.resolve_route_invalid, 2);
  // An id that is not held is a no-op: false, nothing validated, no event.
  assert.equal(s.proxy.resolveConnection(ev.id, { upstreams: 'nonsense' }), false);
  assert.equal(s.proxy.resolveConnection('not-an-id', { upstreams: 'nonsense' }), false);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(errors.length, 2);
  assert.equal(rejections, 0);
});

test('checkResolveRoute: the problems resolveConnection would find without a held connection, before any connection waits', async () => {
  const port = await h.freePort();
  // Not started, and its listener has no defaultCert: what needs a listener is not checked.
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port }], routes: [{ sni: 'a.test', suspended: true }] });
  const upstream = { kind: 'tcp', host: '127.0.0.1', port: 1 };
  assert.deepEqual(proxy.checkResolveRoute({ upstream, terminateTls: false }), []);
  assert.deepEqual(proxy.checkResolveRoute({ upstream, terminateTls: true }), [], "a terminating route without cert: its listener's defaultCert decides");
  assert.deepEqual(proxy.checkResolveRoute(null), []);
  assert.deepEqual(
    proxy.checkResolveRoute({
      upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 70000 }],
      sourceAddressHeader: 'bogus',
      suspended: true,
    }),
    [
      { path: 'route.suspended', message: 'is a route-table field: a resolved connection cannot be suspended again' },
      { path: 'route.upstreams[0].port', message: 'must be an integer in [1, 65535], got 70000' },
      { path: 'route.sourceAddressHeader', message: "must be one of 'none', 'proxyProtocol', 'proxyProtocolV2', 'xForwardedFor', got \"bogus\"" },
    ]
  );
  // A rule between fields of the route (no listener involved): a header-carried fingerprint on a passthrough route.
  assert.deepEqual(
    proxy.checkResolveRoute({ upstream, terminateTls: false, forwardFingerprint: 'ja3' }).map((x) => x.path),
    ['route.forwardFingerprint']
  );
  assert.deepEqual(proxy.checkResolveRoute({ upstream, upstreams: [] }), [
    { path: 'route.upstream', message: 'give either upstream (one) or upstreams, not both' },
  ]);
});

test('a function or a symbol as the route: a problem at route (checkResolveRoute) and a closed connection (resolveConnection), never a throw', async (t) => {
  const s = await suspendedProxy();
  t.after(() => s.close());
  const fn = () => 1;
  assert.deepEqual(s.proxy.checkResolveRoute(fn), [{ path: 'route', message: 'must be an object, got a function' }]);
  assert.deepEqual(s.proxy.checkResolveRoute(Symbol('r')), [{ path: 'route', message: 'must be an object, got a symbol' }]);
  // An id no connection holds: false, nothing thrown.
  assert.equal(s.proxy.resolveConnection('999999', fn), false);
  // A held connection: closed, and the problem is the 'error' event's.
  const errors = [];
  s.proxy.on('error', (e) => errors.push(e));
  const c = client(s.port, 'fn.hold.test');
  const ev = await eventFor(s.events, 'fn.hold.test');
  assert.equal(s.proxy.resolveConnection(ev.id, fn), true);
  await h.waitFor(() => errors.length === 1 && c.closedAt, { what: "the 'error' event and the close" });
  assert.equal(errors[0].code, 'resolve_route_invalid');
  assert.deepEqual(errors[0].errors, [{ path: 'route', message: 'must be an object, got a function' }]);
  assert.equal(c.secure, false);
});

test('config: suspended routes may leave out upstreams; bad values are ConfigErrors', () => {
  // Valid: no upstreams, no cert, and no defaultCert on the listener.
  new RampartProxy({
    listeners: [{ port: 9 }],
    routes: [
      { sni: 'a.test', suspended: true },
      { sni: 'b.test', suspended: false, suspendTimeoutMs: 5000, terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] },
    ],
  });
  let err;
  try {
    new RampartProxy({
      listeners: [{ port: 9, maxPendingSuspended: 0 }],
      routes: [
        { sni: 'a.test', suspended: 'yes' },
        { sni: 'b.test', suspended: true, suspendTimeoutMs: NaN },
        { sni: 'c.test', suspended: true, suspendTimeoutMs: -1 },
        { sni: 'd.test', terminateTls: false },
      ],
    });
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof ConfigError);
  assert.deepEqual(
    err.errors.map((e) => e.path),
    [
      'listeners[0].maxPendingSuspended',
      'routes[0].suspended',
      'routes[0].upstreams',
      'routes[1].suspendTimeoutMs',
      'routes[2].suspendTimeoutMs',
      'routes[3].upstreams',
    ]
  );
  assert.equal(err.errors[5].message, 'is required (it may be left out on a suspended route)');
});
