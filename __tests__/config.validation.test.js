'use strict';
// Bad input gets a clear error naming every offending field at once, and changes nothing.
const test = require('node:test');
const assert = require('node:assert/strict');
const { RampartProxy } = require('..');
const h = require('./helpers');

const { errorsOf } = h;

test('the constructor names every offending listener and route field', () => {
  const errs = errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ host: 'nope', port: 70000, maxConnections: -1, idleTimeoutMs: Infinity }, { port: 8443, mode: 'http' }, { port: 8443 }],
        routes: [
          { sni: 'a b', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: NaN }] },
          { sni: '*.x.com', terminateTls: false, upstreams: [], forwardFingerprint: 'ja4' },
          { sni: 'x.com', upstreams: [{ kind: 'uds' }], terminateTls: 'yes', burts: 3 },
        ],
        workerThreads: 0,
      })
  );
  assert.deepEqual(errs, [
    { path: 'listeners[0].host', message: "must be an IP address to bind ('0.0.0.0', '::', '127.0.0.1'), got \"nope\"" },
    { path: 'listeners[0].port', message: 'must be an integer in [1, 65535], got 70000' },
    { path: 'listeners[0].maxConnections', message: 'must be an integer in [0, 2^53-1], got -1' },
    { path: 'listeners[0].idleTimeoutMs', message: 'must be an integer in [0, 2^53-1], got Infinity' },
    { path: 'listeners[2].port', message: '0.0.0.0:8443 is already bound by listeners[1] (the same host and port twice)' },
    { path: 'routes[0].sni', message: "must be '', a host name or '*.' followed by a host name, got \"a b\"" },
    { path: 'routes[0].upstreams[0].port', message: 'must be an integer in [1, 65535], got NaN' },
    { path: 'routes[1].upstreams', message: 'must hold at least one upstream' },
    {
      path: 'routes[1].forwardFingerprint',
      message: "sets HTTP request headers: needs terminateTls: true (or sourceAddressHeader: 'proxyProtocolV2', where the fingerprint rides a PROXY v2 TLV)",
    },
    {
      path: 'routes[2].burts',
      message:
        'unknown field; expected one of: sni, upstreams, terminateTls, cert, http2, sourceAddressHeader, forwardFingerprint, connectTimeoutMs, maxConnectionsPerSecond, burst, protocol, mtls, metricsGroup, suspended, suspendTimeoutMs, balance, ipAffinity, ipAffinityTtlMs, tunnels, tls, concurrency',
    },
    { path: 'routes[2].upstreams[0].path', message: "is required for kind 'uds'" },
    { path: 'routes[2].terminateTls', message: 'must be a boolean, got "yes"' },
    { path: 'workerThreads', message: 'must be an integer in [1, 256], got 0' },
  ]);
});

test('a terminating route without any certificate is refused', () => {
  const errs = errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ host: '127.0.0.1', port: 9 }],
        routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: 'h', port: 1 }] }],
      })
  );
  assert.deepEqual(errs, [{ path: 'routes[0].cert', message: 'is required when terminateTls is true and a listener has no defaultCert (127.0.0.1:9)' }]);
});

test('a key that does not match its certificate is refused', () => {
  const a = h.selfSigned(['a.test']);
  const b = h.selfSigned(['b.test']);
  const errs = errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ host: '127.0.0.1', port: 9, defaultCert: { certChain: a.certChain, privateKey: b.privateKey } }],
        routes: [],
      })
  );
  assert.equal(errs.length, 1);
  assert.equal(errs[0].path, 'listeners[0].defaultCert');
  assert.match(errs[0].message, /^privateKey does not match the first certificate of certChain/);
});

test('updateConfig with unknown ports and bad routes throws and changes nothing', async () => {
  const port = await h.freePort();
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: h.selfSigned() }],
    routes: [],
  });
  const errs = errorsOf(() =>
    proxy.updateConfig({
      routes: [{ sni: 'x', upstreams: [{ kind: 'tcp', host: 'h', port: 0 }] }],
      protection: [
        { port: 1, protection: null },
        { port: 'x', protection: null },
      ],
      extra: true,
    })
  );
  assert.deepEqual(errs, [
    { path: 'extra', message: 'unknown field; expected one of: routes, protection' },
    { path: 'routes[0].upstreams[0].port', message: 'must be an integer in [1, 65535], got 0' },
    { path: 'protection[0].port', message: `no listener on port 1; listeners: ${port}` },
    { path: 'protection[1].port', message: 'must be an integer in [1, 65535], got "x"' },
  ]);
});

test('lone surrogates, a zero event cap and unknown blockedIps ports are ConfigErrors with paths', async () => {
  const port = await h.freePort();
  const errs = errorsOf(
    () =>
      new RampartProxy({
        listeners: [{ host: '127.0.0.1', port }],
        routes: [{ sni: 'a\ud800', terminateTls: false, upstreams: [{ kind: 'tcp', host: 'h', port: 1 }] }],
        blockedEvents: { maxPerSecond: 0 },
      })
  );
  assert.deepEqual(
    errs.map((e) => e.path),
    ['routes[0].sni', 'blockedEvents.maxPerSecond']
  );
  assert.match(errs[0].message, /lone UTF-16 surrogate/);
  const proxy = new RampartProxy({ listeners: [{ host: '127.0.0.1', port }], routes: [] });
  assert.deepEqual(
    errorsOf(() => proxy.blockIp('127.0.0.9', { reason: 'x\ud800' })).map((e) => e.path),
    ['opts.reason']
  );
  assert.deepEqual(
    errorsOf(() => proxy.blockedIps({ port: 1 })),
    [{ path: 'opts.port', message: 'no listener on port 1' }]
  );
  assert.deepEqual(proxy.blockedIps({ port }).dynamicBlocklist, []);
});

test("Symphony's zero values: idleTimeoutMs 0 (no idle timeout), tlsHandshakeTimeoutMs 0 (the default), halfCloseTimeoutMs 0 (no bound); negatives, NaN and fractions stay errors", () => {
  const config = (listener, extra = {}) => ({ listeners: [{ port: 9, ...listener }], routes: [], ...extra });
  assert.doesNotThrow(() => new RampartProxy(config({ idleTimeoutMs: 0, protection: { tlsHandshakeTimeoutMs: 0 } }, { halfCloseTimeoutMs: 0 })));
  assert.deepEqual(
    errorsOf(() => new RampartProxy(config({ idleTimeoutMs: -1, protection: { tlsHandshakeTimeoutMs: -1 } }, { halfCloseTimeoutMs: NaN }))),
    [
      { path: 'halfCloseTimeoutMs', message: 'must be an integer in [0, 2^53-1], got NaN' },
      { path: 'listeners[0].idleTimeoutMs', message: 'must be an integer in [0, 2^53-1], got -1' },
      { path: 'listeners[0].protection.tlsHandshakeTimeoutMs', message: 'must be a finite number >= 0 (0: the default, 10000), got -1' },
    ]
  );
  assert.deepEqual(
    errorsOf(() => new RampartProxy(config({ idleTimeoutMs: 0.5 }, { halfCloseTimeoutMs: 0.5 }))),
    [
      { path: 'halfCloseTimeoutMs', message: 'must be an integer in [0, 2^53-1], got 0.5' },
      { path: 'listeners[0].idleTimeoutMs', message: 'must be an integer in [0, 2^53-1], got 0.5' },
    ]
  );
});
