'use strict';
// Route isolation (README: Route isolation): a route that fails to build — one tenant's
// mismatched certificate, a conflicting setting, a repeated sni — is dropped and reported ('error'
// route_failed, metrics().failingRoutes, Prometheus) while the other routes serve; a route list
// in which every route fails still throws and changes nothing. Real node:tls clients.
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const { RampartProxy, ConfigError } = require('..');
const h = require('./helpers');

const MISMATCH = /^privateKey does not match the first certificate of certChain: /;

/** Connects with `servername`; resolves 'secure' after the handshake or the error's code. */
function handshake(port, servername, ca) {
  return new Promise((resolve) => {
    const s = tls.connect({ port, host: '127.0.0.1', servername, ca, rejectUnauthorized: Boolean(ca) }, () => {
      s.destroy();
      resolve('secure');
    });
    s.on('error', (e) => resolve(e.code || e.message));
  });
}

/** The route failure of `metrics().routeFailures` / the event with the key's message replaced. */
function withoutKeyMessage(errors) {
  return errors.map((e) => (MISMATCH.test(e.message) ? { ...e, message: 'MISMATCH' } : e));
}

test('a tenant with a mismatched certificate is dropped and reported; its neighbour serves', async (t) => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const good = h.selfSigned(['good.test']);
  const bad = h.selfSigned(['bad.test']);
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }];
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port }],
    routes: [
      // A renewal gone wrong: the new chain beside the old key.
      { sni: 'bad.test', upstreams: up, cert: { certChain: bad.certChain, privateKey: good.privateKey } },
      { sni: 'good.test', upstreams: up, cert: good },
    ],
  });
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  await h.waitFor(() => errors.length === 1, { what: "the route's 'error' event" });
  const [ev] = errors;
  assert.match(ev.errors[0].message, MISMATCH);
  assert.deepEqual(
    { ...ev, errors: withoutKeyMessage(ev.errors) },
    {
      code: 'route_failed',
      message: `route "bad.test" (routes[0]) failed to build and is not served; the other routes are: routes[0].cert: ${ev.errors[0].message}`,
      ip: null,
      port: null,
      listener: null,
      route: 'bad.test',
      index: 0,
      errors: [{ path: 'routes[0].cert', message: 'MISMATCH' }],
      lastGoodCert: false,
    }
  );
  const m = proxy.metrics();
  assert.deepEqual(
    { routes: m.routes, failingRoutes: m.failingRoutes, routeFailuresTotal: m.routeFailuresTotal },
    { routes: 1, failingRoutes: 1, routeFailuresTotal: 1 }
  );
  assert.deepEqual(
    m.routeFailures.map((f) => ({ ...f, errors: withoutKeyMessage(f.errors) })),
    [{ route: 'bad.test', index: 0, errors: [{ path: 'routes[0].cert', message: 'MISMATCH' }], lastGoodCert: false }]
  );
  assert.deepEqual(
    m.routeMetrics.map((r) => r.route),
    ['good.test']
  );
  const prom = proxy.prometheus();
  for (const line of ['rampart_routes 1', 'rampart_failing_routes 1', 'rampart_route_failures_total 1']) {
    assert.ok(prom.split('\n').includes(line), line);
  }

  // The neighbour serves, verified against its own certificate; the dropped tenant has no route.
  const r = await h.tlsRoundTrip({ port, servername: 'good.test', payload: Buffer.from('still here'), ca: good.certChain });
  assert.equal(r.data.toString(), 'still here');
  assert.notEqual(await handshake(port, 'bad.test', bad.certChain), 'secure');
  await h.waitFor(() => proxy.metrics().listeners[0].errorsByReason.no_route === 1, { what: 'no_route for bad.test' });
  assert.equal(errors.length, 1, 'a connection to a dropped route is counted, not emitted');
});

test('updateConfig: all routes broken throws and changes nothing; a fix serves; a repeated sni is dropped', async (t) => {
  const echo = await h.echoServer({ tag: 'A' });
  const other = await h.echoServer({ tag: 'B' });
  const port = await h.freePort();
  const a = h.selfSigned(['a.test']);
  const b = h.selfSigned(['b.test']);
  const upA = [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }];
  const upB = [{ kind: 'tcp', host: '127.0.0.1', port: other.address().port }];
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port }], routes: [{ sni: 'a.test', upstreams: upA, cert: a }] });
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
    await h.closeServer(other);
  });
  const roundTrip = async (sni, ca) => (await h.tlsRoundTrip({ port, servername: sni, payload: Buffer.from('x'), expect: 2, ca })).data.toString();
  assert.equal(await roundTrip('a.test', a.certChain), 'Ax');

  // Every route broken: a new tenant with a mismatched key (no live certificate to keep), and a
  // route that needs a certificate it does not have.
  let err;
  try {
    proxy.updateConfig({
      routes: [
        { sni: 'c.test', upstreams: upA, cert: { certChain: a.certChain, privateKey: b.privateKey } },
        { sni: 'b.test', upstreams: upB },
      ],
    });
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof ConfigError);
  assert.deepEqual(withoutKeyMessage(err.errors), [
    { path: 'routes[0].cert', message: 'MISMATCH' },
    { path: 'routes[1].cert', message: `is required when terminateTls is true and a listener has no defaultCert (127.0.0.1:${port})` },
  ]);
  assert.equal(await roundTrip('a.test', a.certChain), 'Ax', 'the old table still serves');
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes, proxy.metrics().routeFailuresTotal], [1, 0, 0]);
  await new Promise((r) => setImmediate(r));
  assert.equal(errors.length, 0, 'a refused update emits nothing');

  // One broken beside a good one: the good one serves, the broken one is reported.
  proxy.updateConfig({
    routes: [
      { sni: 'a.test', upstreams: upA, cert: a },
      { sni: 'b.test', upstreams: upB, cert: b },
      { sni: 'B.test.', upstreams: upA, cert: a },
    ],
  });
  assert.equal(await roundTrip('b.test', b.certChain), 'Bx');
  await h.waitFor(() => errors.length === 1, { what: "the repeated sni's 'error'" });
  assert.deepEqual(errors[0], {
    code: 'route_failed',
    message: 'route "B.test." (routes[2]) failed to build and is not served; the other routes are: routes[2].sni: duplicates the sni of routes[1]',
    ip: null,
    port: null,
    listener: null,
    route: 'B.test.',
    index: 2,
    errors: [{ path: 'routes[2].sni', message: 'duplicates the sni of routes[1]' }],
    lastGoodCert: false,
  });
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes, proxy.metrics().routeFailuresTotal], [2, 1, 1]);

  // The fixed table: nothing failing any more.
  proxy.updateConfig({
    routes: [
      { sni: 'a.test', upstreams: upA, cert: a },
      { sni: 'b.test', upstreams: upB, cert: b },
    ],
  });
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes, proxy.metrics().routeFailures, proxy.metrics().routeFailuresTotal], [2, 0, [], 1]);
  assert.equal(await roundTrip('a.test', a.certChain), 'Ax');
});

test('a renewal caught between its chain and its key keeps serving the last good certificate, with the new settings', async (t) => {
  const one = await h.echoServer({ tag: '1' });
  const two = await h.echoServer({ tag: '2' });
  const port = await h.freePort();
  const old = h.selfSigned(['t.test']);
  const renewed = h.selfSigned(['t.test']);
  const route = (cert, srv) => ({ sni: 't.test', cert, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: srv.address().port }] });
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port }], routes: [route(old, one)] });
  const errors = [];
  proxy.on('error', (e) => errors.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(one);
    await h.closeServer(two);
  });
  const trip = async (ca) => (await h.tlsRoundTrip({ port, servername: 't.test', payload: Buffer.from('x'), expect: 2, ca })).data.toString();
  assert.equal(await trip(old.certChain), '1x');
  // The new chain is written, its key not yet: the tenant keeps its old certificate, and the
  // update's other settings (a new upstream) apply.
  proxy.updateConfig({ routes: [route({ certChain: renewed.certChain, privateKey: old.privateKey }, two)] });
  assert.equal(await trip(old.certChain), '2x');
  await h.waitFor(() => errors.length === 1, { what: "the route's 'error'" });
  assert.equal(errors[0].lastGoodCert, true);
  assert.match(
    errors[0].message,
    /^route "t\.test" \(routes\[0\]\) failed to build and serves its last good certificate: routes\[0\]\.cert: privateKey does not match/
  );
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes, proxy.metrics().routeFailures[0].lastGoodCert], [1, 1, true]);
  // The key arrives: the renewed certificate serves, nothing fails.
  proxy.updateConfig({ routes: [route(renewed, two)] });
  assert.equal(await trip(renewed.certChain), '2x');
  assert.deepEqual([proxy.metrics().routes, proxy.metrics().failingRoutes], [1, 0]);
});

test('a conflicting setting is a build failure; a field of the wrong type fails the whole config', () => {
  const cert = h.selfSigned(['localhost']);
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: 1 }];
  const proxy = new RampartProxy({
    listeners: [{ port: 9, defaultCert: cert }],
    routes: [
      { sni: 'ok.test', upstreams: up },
      { sni: 'x.test', upstreams: [...up, { kind: 'uds', path: '/tmp/h2.sock', protocol: 'h2' }], http2: false },
    ],
  });
  assert.deepEqual(proxy.metrics().routeFailures, [
    {
      route: 'x.test',
      index: 1,
      errors: [{ path: 'routes[1].http2', message: "is false but upstreams[1] has protocol 'h2' (leave http2 out: an 'h2' upstream offers h2 in ALPN)" }],
      lastGoodCert: false,
    },
  ]);
  assert.deepEqual(
    h.errorsOf(
      () =>
        new RampartProxy({
          listeners: [{ port: 9, defaultCert: cert }],
          routes: [
            { sni: 'ok.test', upstreams: up },
            { sni: 'x.test', upstreams: up, connectTimeoutMs: NaN },
          ],
        })
    ),
    [{ path: 'routes[1].connectTimeoutMs', message: 'must be an integer in [1, 2^53-1], got NaN' }]
  );
});

test('isolateRoutes: false fails the whole config on any route that does not build', () => {
  const a = h.selfSigned(['a.test']);
  const b = h.selfSigned(['b.test']);
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: 1 }];
  const errs = h.errorsOf(
    () =>
      new RampartProxy({
        isolateRoutes: false,
        listeners: [{ port: 9 }],
        routes: [
          { sni: 'a.test', upstreams: up, cert: a },
          { sni: 'b.test', upstreams: up, cert: { certChain: b.certChain, privateKey: a.privateKey } },
        ],
      })
  );
  assert.deepEqual(withoutKeyMessage(errs), [{ path: 'routes[1].cert', message: 'MISMATCH' }]);
  assert.deepEqual(
    h.errorsOf(() => new RampartProxy({ isolateRoutes: 'no', listeners: [{ port: 9 }], routes: [] })),
    [{ path: 'isolateRoutes', message: 'must be a boolean, got "no"' }]
  );
});
