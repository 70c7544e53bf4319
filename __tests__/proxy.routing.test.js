'use strict';
// SNI routing: exact → *.suffix (one label) → default '', case-insensitive, one trailing dot
// ignored; a ClientHello split into 1-byte TCP segments still routes; no route → closed and
// counted as no_route.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { RampartProxy } = require('..');
const h = require('./helpers');

test('SNI routing picks the right upstream', async (t) => {
  const exact = await h.echoServer({ tag: 'E' });
  const wild = await h.echoServer({ tag: 'W' });
  const def = await h.echoServer({ tag: 'D' });
  const capture = await h.captureServer();
  const [port, port2] = await h.freePorts(2);
  const up = (s) => [{ kind: 'tcp', host: '127.0.0.1', port: s.address().port }];
  const proxy = new RampartProxy({
    listeners: [
      { host: '127.0.0.1', port, defaultCert: h.selfSigned() },
      { host: '127.0.0.1', port: port2, defaultCert: h.selfSigned() },
    ],
    routes: [
      { sni: 'api.example.com', upstreams: up(exact), terminateTls: true },
      { sni: '*.example.com', upstreams: up(wild), terminateTls: true },
      { sni: 'split.test', upstreams: up(capture), terminateTls: false },
      { sni: '', upstreams: up(def), terminateTls: true },
    ],
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    for (const s of [exact, wild, def, capture]) await h.closeServer(s);
  });
  const tag = async (servername) => {
    const r = await h.tlsRoundTrip({ port, servername, payload: Buffer.from('x'), expect: 2 });
    return r.data.toString();
  };

  await t.test('exact beats wildcard', async () => assert.equal(await tag('api.example.com'), 'Ex'));
  await t.test('API.Example.COM. matches api.example.com', async () => assert.equal(await tag('API.Example.COM.'), 'Ex'));
  await t.test('wildcard matches one label', async () => assert.equal(await tag('www.example.com'), 'Wx'));
  await t.test('wildcard does not match two labels: default', async () => assert.equal(await tag('a.b.example.com'), 'Dx'));
  await t.test('wildcard does not match the bare suffix: default', async () => assert.equal(await tag('example.com'), 'Dx'));
  await t.test('unknown name goes to the default route', async () => assert.equal(await tag('other.org'), 'Dx'));

  await t.test('a ClientHello split into 1-byte TCP segments still routes', async () => {
    const hello = await h.recordClientHello('split.test');
    const s = net.connect({ port, host: '127.0.0.1' });
    s.setNoDelay(true);
    s.on('error', () => {});
    await new Promise((r) => s.once('connect', r));
    for (const b of hello) {
      await new Promise((r) => s.write(Buffer.from([b]), r));
      await new Promise((r) => setImmediate(r));
    }
    await h.waitFor(() => capture.captured.length === 1 && capture.captured[0].data.length === hello.length, {
      what: 'the upstream to receive the whole hello',
    });
    assert.equal(capture.captured[0].data.equals(hello), true);
    s.destroy();
  });

  await t.test('no route: closed and counted as no_route', async () => {
    await proxy.updateConfig({ routes: [{ sni: 'only.example.com', upstreams: up(exact), terminateTls: true }] });
    await assert.rejects(h.tlsRoundTrip({ port: port2, servername: 'nomatch.example.org' }));
    await h.waitFor(() => proxy.metrics().listeners[1].errorsByReason.no_route === 1, { what: 'no_route count' });
    assert.equal(proxy.metrics().listeners[0].errorsByReason.no_route, 0);
  });
});

test('a route-wide maxConnectionsPerSecond limits all clients together', async (t) => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [
      { sni: 'limited.test', maxConnectionsPerSecond: 0.5, burst: 2, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] },
      { sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] },
    ],
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  assert.equal(await h.admitted(port, '127.0.0.2', { servername: 'limited.test' }), true);
  assert.equal(await h.admitted(port, '127.0.0.3', { servername: 'limited.test' }), true);
  assert.equal(await h.admitted(port, '127.0.0.4', { servername: 'limited.test' }), false);
  assert.equal(await h.admitted(port, '127.0.0.4', { servername: 'other.test' }), true);
  // The route's own limit is an error of the route, not the client's fault: no 'blocked' event.
  await h.waitFor(() => proxy.metrics().listeners[0].errorsByReason.route_rate_limited === 1, { what: 'route_rate_limited' });
  assert.equal(proxy.metrics().routeMetrics[0].errorsByReason.route_rate_limited, 1);
  assert.deepEqual(events, []);
});
