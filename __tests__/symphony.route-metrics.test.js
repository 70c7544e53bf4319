'use strict';
// Symphony drop-in, route metrics (docs/proxy.md: "Route metrics"): metricsGroup, metrics().routeMetrics[]
// with exact counts, the same in Prometheus with route and group labels, and a route-limit
// refusal counted as the route's route_rate_limited error with no 'blocked' event.
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

/** `routeMetrics[].upstream` of an idle route with `concurrency: { mode: 'off' }`. */
const IDLE_OFF = {
  mode: 'off',
  inFlight: 0,
  inFlightPriority: 0,
  limit: null,
  otherLimit: null,
  latencyMs: 0,
  proxyDelayMs: 0,
  baselineMs: 0,
  overloaded: false,
  refused: 0,
  refusedPriority: 0,
  queued: 0,
  waited: 0,
  queueTimeouts: 0,
  answered: 0,
  connectFailures: 0,
  connectMs: 0,
};

test('routeMetrics: exact per-route counts, route_rate_limited without a blocked event', async (t) => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }];
  const routes = [
    { sni: 'a.test', metricsGroup: 'tenant1', maxConnectionsPerSecond: 0.001, burst: 2, upstreams: up },
    { sni: 'b.test', metricsGroup: 'tenant1', upstreams: up },
    { sni: '', upstreams: up },
  ];
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }], routes });
  const blocked = [];
  proxy.on('blocked', (e) => blocked.push(e));
  await proxy.start();
  let held;
  t.after(async () => {
    if (held) held.destroy();
    await proxy.stop();
    await h.closeServer(echo);
  });
  const trip = (servername, payload) => h.tlsRoundTrip({ port, servername, payload: Buffer.from(payload) });
  assert.equal((await trip('a.test', 'hello')).data.toString(), 'hello');
  assert.equal((await trip('a.test', 'world')).data.toString(), 'world');
  await assert.rejects(trip('a.test', 'third'), 'the route limit (burst 2) refuses the third');
  assert.equal((await trip('b.test', 'xyz')).data.toString(), 'xyz');
  // One connection held open on b.test.
  held = tls.connect({ port, host: '127.0.0.1', servername: 'b.test', rejectUnauthorized: false });
  await new Promise((resolve) => held.once('secureConnect', () => held.write('1')) && held.once('data', resolve));
  const byRoute = () => Object.fromEntries(proxy.metrics().routeMetrics.map((r) => [r.route, r]));
  await h.waitFor(() => byRoute()['a.test'].activeConnections === 0 && byRoute()['b.test'].activeConnections === 1, { what: 'active counts' });
  const m = byRoute();
  const zero = Object.fromEntries(Object.keys(m['a.test'].errorsByReason).map((k) => [k, 0]));
  const upstream = IDLE_OFF; // opaque routes: concurrency off by default, still measured
  const upstreams = (active) => [{ upstream: `127.0.0.1:${echo.address().port}`, activeConnections: active, cpuPermille: null }];
  // The mean upstream connect time of the routes that connected: measured, so only its sign is exact.
  for (const r of ['a.test', 'b.test']) {
    assert.ok(m[r].upstream.connectMs > 0, `${r} connectMs ${m[r].upstream.connectMs}`);
    m[r].upstream.connectMs = 0;
  }
  assert.deepEqual(m['a.test'], {
    route: 'a.test',
    metricsGroup: 'tenant1',
    activeConnections: 0,
    connections: 2,
    errors: 1,
    bytesReceived: 10,
    bytesSent: 10,
    errorsByReason: { ...zero, route_rate_limited: 1 },
    upstream,
    upstreams: upstreams(0),
  });
  assert.deepEqual(m['b.test'], {
    route: 'b.test',
    metricsGroup: 'tenant1',
    activeConnections: 1,
    connections: 2,
    errors: 0,
    bytesReceived: 4,
    bytesSent: 4,
    errorsByReason: zero,
    upstream,
    upstreams: upstreams(1),
  });
  assert.deepEqual(m[''], {
    route: '',
    metricsGroup: '',
    activeConnections: 0,
    connections: 0,
    errors: 0,
    bytesReceived: 0,
    bytesSent: 0,
    errorsByReason: zero,
    upstream,
    upstreams: upstreams(0),
  });
  assert.deepEqual(
    proxy.metrics().routeMetrics.map((r) => r.route),
    ['a.test', 'b.test', '']
  );
  assert.deepEqual(blocked, [], "a route-limit refusal is not the client's fault: no blocked event");
  const l = proxy.metrics().listeners[0];
  assert.equal(l.blockedByReason.rate_limited, 0);
  assert.equal(l.errorsByReason.route_rate_limited, 1);
  const prom = proxy.prometheus();
  for (const line of [
    'rampart_route_connections_total{route="a.test",group="tenant1"} 2',
    'rampart_route_active_connections{route="b.test",group="tenant1"} 1',
    'rampart_route_bytes_received_total{route="a.test",group="tenant1"} 10',
    'rampart_route_bytes_sent_total{route="b.test",group="tenant1"} 4',
    'rampart_route_errors_total{route="a.test",group="tenant1",reason="route_rate_limited"} 1',
    'rampart_route_connections_total{route="",group=""} 0',
  ]) {
    assert.ok(prom.split('\n').includes(line), `prometheus has ${line}`);
  }
  // A reload that keeps a route's name and group keeps its counters; a changed group starts at zero.
  proxy.updateConfig({ routes: [routes[0], { ...routes[1], metricsGroup: 'tenant2' }, routes[2]] });
  const after = byRoute();
  assert.equal(after['a.test'].connections, 2);
  assert.deepEqual([after['b.test'].metricsGroup, after['b.test'].connections], ['tenant2', 0]);
});

test('metricsGroup is validated', () => {
  assert.throws(
    () =>
      new RampartProxy({
        listeners: [{ port: 9 }],
        routes: [{ sni: '', terminateTls: false, metricsGroup: '', upstreams: [{ kind: 'tcp', host: 'h', port: 1 }] }],
      }),
    (e) =>
      e.errors.length === 1 &&
      e.errors[0].path === 'routes[0].metricsGroup' &&
      e.errors[0].message === 'must be 1..=128 characters without control characters, got ""'
  );
});

test('routeMetrics[].upstream: exact idle capacity per mode, in Prometheus, kept across updateConfig', async (t) => {
  const port = await h.freePort();
  const up = [{ kind: 'tcp', host: '127.0.0.1', port: 1 }];
  const routes = [
    { sni: 'http.test', protocol: 'http', upstreams: up },
    { sni: 'fixed.test', protocol: 'http', concurrency: { mode: 'fixed', limit: 20, priorityShare: 0.25 }, upstreams: up },
    { sni: 'tuned.test', http2: true, concurrency: { minLimit: 5, maxLimit: 50, initialLimit: 40 }, upstreams: up },
    { sni: '', upstreams: up },
  ];
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned(['localhost']) }], routes });
  await proxy.start();
  t.after(() => proxy.stop());
  const byRoute = () => Object.fromEntries(proxy.metrics().routeMetrics.map((r) => [r.route, r.upstream]));
  const idle = (mode, limit, otherLimit) => ({ ...IDLE_OFF, mode, limit, otherLimit });
  assert.deepEqual(byRoute(), {
    'http.test': idle('adaptive', 20, 16),
    'fixed.test': idle('fixed', 20, 15),
    'tuned.test': idle('adaptive', 40, 32),
    '': IDLE_OFF,
  });
  const prom = proxy.prometheus().split('\n');
  for (const line of [
    'rampart_route_upstream_in_flight{route="http.test",group="http.test"} 0',
    'rampart_route_upstream_limit{route="fixed.test",group="fixed.test"} 20',
    'rampart_route_upstream_overloaded{route="tuned.test",group="tuned.test"} 0',
    'rampart_route_upstream_refused_total{route="",group=""} 0',
    'rampart_route_upstream_connect_failures_total{route="http.test",group="http.test"} 0',
  ]) {
    assert.ok(prom.includes(line), `prometheus has ${line}`);
  }
  assert.ok(!prom.some((l) => l.startsWith('rampart_route_upstream_limit{route=""')), 'no limit sample for an off route');
  // A reload applies the new block to the route of the same name.
  proxy.updateConfig({ routes: [{ ...routes[0], concurrency: { mode: 'fixed', limit: 3 } }, routes[3]] });
  assert.deepEqual(byRoute(), { 'http.test': idle('fixed', 3, 2), '': IDLE_OFF });
});

test('concurrency and overload are validated, every bad field named', () => {
  const route = (concurrency) => ({ sni: '', terminateTls: false, protocol: 'http', concurrency, upstreams: [{ kind: 'tcp', host: 'h', port: 1 }] });
  assert.throws(
    () =>
      new RampartProxy({
        listeners: [{ port: 9 }],
        overload: { eventLoopDelayMs: 0 },
        routes: [route({ mode: 'fixed', minLimit: 3, priorityShare: 1, retryAfterS: Infinity })],
      }),
    (e) => {
      assert.deepEqual(
        e.errors.map((x) => x.path),
        [
          'routes[0].concurrency.limit',
          'routes[0].concurrency.minLimit',
          'routes[0].concurrency.priorityShare',
          'routes[0].concurrency.retryAfterS',
          'overload.eventLoopDelayMs',
        ]
      );
      assert.equal(e.errors[0].message, "is required with mode: 'fixed'");
      assert.equal(e.errors[1].message, "needs mode: 'adaptive'");
      return true;
    }
  );
});
