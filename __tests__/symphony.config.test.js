'use strict';
// Symphony drop-in, the config as a whole (docs/proxy.md: "Coming from Symphony"): a Symphony-shaped
// config with every supported field constructs and serves; the Symphony fields not built yet are
// each a ConfigError saying so, never silently ignored.
const test = require('node:test');
const assert = require('node:assert/strict');
const { RampartProxy, ConfigError } = require('..');
const h = require('./helpers');

test('a Symphony-shaped config with every supported field runs unchanged', async (t) => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const cert = h.selfSigned(['localhost']);
  const ca = h.selfSigned(['client-ca']).certChain;
  const proxy = new RampartProxy({
    listeners: [
      { host: '127.0.0.1', port, defaultCert: cert, maxConnections: 100, idleTimeoutMs: 60000, protection: { rateLimit: { connectionsPerSecond: 50 } } },
    ],
    routes: [
      {
        sni: 'localhost',
        upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }],
        terminateTls: true,
        cert,
        metricsGroup: 'app',
        maxConnectionsPerSecond: 100,
        burst: 100,
        sourceAddressHeader: 'none',
      },
      { sni: 'secure.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }], mtls: { clientCaCert: ca, requireClientCert: false } },
      {
        sni: 'split.test',
        upstreams: [
          { kind: 'uds', path: '/tmp/h2.sock', protocol: 'h2' },
          { kind: 'tcp', host: '127.0.0.1', port: echo.address().port, protocol: 'http/1.1' },
        ],
      },
      {
        sni: 'held.test',
        upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }],
        terminateTls: true,
        suspended: true,
        suspendTimeoutMs: 5000,
      },
    ],
    tcpKeepalive: { enabled: true, idleMs: 300000, intervalMs: 30000, retries: 5 },
    halfCloseTimeoutMs: 300000,
    readBufferSize: 65536,
    clientReadBufferSize: 16384,
    upstreamReadBufferSize: 65536,
  });
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  const r = await h.tlsRoundTrip({ port, servername: 'localhost', payload: Buffer.from('symphony') });
  assert.equal(r.data.toString(), 'symphony');
  assert.equal(proxy.metrics().routeMetrics[0].metricsGroup, 'app');
});

test('a Symphony config with every field is accepted but for real errors, each named by its path', () => {
  // A conflict inside one route drops that route (route isolation) ...
  const proxy = new RampartProxy({
    listeners: [{ port: 9, defaultCert: h.selfSigned(['localhost']) }],
    routes: [
      { sni: 'a.test', upstreams: [{ kind: 'uds', path: '/tmp/a.sock', protocol: 'h2' }] },
      { sni: 'b.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }], ipAffinityTtlMs: 1000 },
    ],
  });
  assert.deepEqual(proxy.metrics().routeFailures, [
    { route: 'b.test', index: 1, errors: [{ path: 'routes[1].ipAffinityTtlMs', message: 'needs ipAffinity: true' }], lastGoodCert: false },
  ]);
  // ... a field's own problem fails the config.
  let errs;
  try {
    new RampartProxy({
      listeners: [{ port: 9, defaultCert: h.selfSigned(['localhost']) }],
      routes: [
        { sni: 'a.test', upstreams: [{ kind: 'uds', path: '/tmp/a.sock', protocol: 'h2' }] },
        { sni: 'b.test', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1, ipAffinity: 'yes' }] },
      ],
    });
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    errs = e.errors;
  }
  assert.deepEqual(errs, [{ path: 'routes[1].upstreams[0].ipAffinity', message: 'must be a boolean, got "yes"' }]);
});
