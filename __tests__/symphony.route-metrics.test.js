'use strict';
// Symphony drop-in, route metrics (README: "Route metrics"): metricsGroup, metrics().routeMetrics[]
// with exact counts, the same in Prometheus with route and group labels, and a route-limit
// refusal counted as the route's route_rate_limited error with no 'blocked' event.
const test = require('node:test');
const assert = require('node:assert/strict');
const tls = require('node:tls');
const { RampartProxy } = require('..');
const h = require('./helpers');

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
  assert.deepEqual(m['a.test'], {
    route: 'a.test', metricsGroup: 'tenant1', activeConnections: 0, connections: 2, errors: 1,
    bytesReceived: 10, bytesSent: 10, errorsByReason: { ...zero, route_rate_limited: 1 },
  });
  assert.deepEqual(m['b.test'], {
    route: 'b.test', metricsGroup: 'tenant1', activeConnections: 1, connections: 2, errors: 0,
    bytesReceived: 4, bytesSent: 4, errorsByReason: zero,
  });
  assert.deepEqual(m[''], {
    route: '', metricsGroup: '', activeConnections: 0, connections: 0, errors: 0, bytesReceived: 0, bytesSent: 0, errorsByReason: zero,
  });
  assert.deepEqual(proxy.metrics().routeMetrics.map((r) => r.route), ['a.test', 'b.test', '']);
  assert.deepEqual(blocked, [], 'a route-limit refusal is not the client\'s fault: no blocked event');
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
    () => new RampartProxy({ listeners: [{ port: 9 }], routes: [{ sni: '', terminateTls: false, metricsGroup: '', upstreams: [{ kind: 'tcp', host: 'h', port: 1 }] }] }),
    (e) => e.errors.length === 1 && e.errors[0].path === 'routes[0].metricsGroup' && e.errors[0].message === 'must be 1..=128 characters without control characters, got ""'
  );
});
