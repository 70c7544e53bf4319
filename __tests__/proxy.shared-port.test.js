'use strict';
// Several listeners on one port: one policy for the port, a table and metrics each;
// the port names all of them in updateConfig, blockIp and blockedIps.
const test = require('node:test');
const assert = require('node:assert/strict');
const { RampartProxy } = require('..');
const h = require('./helpers');

test('two listeners on one port share one policy and keep their own tables and metrics', async (t) => {
  const echo = await h.echoServer();
  const port = await h.freePort();
  const cert = h.selfSigned();
  const proxy = new RampartProxy({
    listeners: [
      { host: '127.0.0.1', port, defaultCert: cert, protection: { rateLimit: { connectionsPerSecond: 0.01, burst: 1 } } },
      { host: '127.0.0.2', port, defaultCert: cert },
    ],
    routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] }],
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  await proxy.start();
  t.after(async () => {
    await proxy.stop();
    await h.closeServer(echo);
  });
  const via = (host, src) => h.admitted(port, src, { host });
  // The policy given on the first listener is the second's too; each counts on its own table.
  assert.equal(await via('127.0.0.1', '127.0.3.1'), true);
  assert.equal(await via('127.0.0.2', '127.0.3.1'), true);
  assert.equal(await via('127.0.0.1', '127.0.3.1'), false);
  assert.equal(await via('127.0.0.2', '127.0.3.1'), false);
  await h.waitFor(() => events.length === 2, { what: 'two blocked events' });
  assert.deepEqual(events.map((e) => [e.listener, e.port, e.reason, e.ip]).sort(), [
    [`127.0.0.1:${port}`, port, 'rate_limited', '127.0.3.1'],
    [`127.0.0.2:${port}`, port, 'rate_limited', '127.0.3.1'],
  ]);
  const m = proxy.metrics().listeners;
  assert.deepEqual(
    m.map((l) => [l.address, l.port, l.accepted, l.blockedByReason.rate_limited, l.trackedIps]),
    [
      [`127.0.0.1:${port}`, port, 1, 1, 1],
      [`127.0.0.2:${port}`, port, 1, 1, 1],
    ]
  );
  // blockedIps({ port }) lists both listeners' entries under the port (deduplicated by default).
  assert.deepEqual(proxy.blockedIps({ port }).rateLimited, ['127.0.3.1']);
  assert.equal(proxy.blockedIps({ port, detail: true }).rateLimited.length, 1);

  // updateConfig on the port replaces the policy of both listeners.
  proxy.updateConfig({ protection: [{ port, protection: { rateLimit: { connectionsPerSecond: 0.01, burst: 3 } } }] });
  assert.equal(await via('127.0.0.1', '127.0.3.1'), true);
  assert.equal(await via('127.0.0.2', '127.0.3.1'), true);
  // blockIp with the port blocks on both listeners.
  proxy.blockIp('127.0.3.2', { port });
  assert.equal(await via('127.0.0.1', '127.0.3.2'), false);
  assert.equal(await via('127.0.0.2', '127.0.3.2'), false);
  await h.waitFor(() => events.filter((e) => e.reason === 'dynamic_blocked').length === 2, { what: 'dynamic_blocked on both' });
  assert.deepEqual(
    events
      .filter((e) => e.reason === 'dynamic_blocked')
      .map((e) => e.listener)
      .sort(),
    [`127.0.0.1:${port}`, `127.0.0.2:${port}`]
  );
  assert.deepEqual(proxy.blockedIps({ port }).dynamicBlocklist, ['127.0.3.2/32']);
  assert.equal(proxy.unblockIp('127.0.3.2', { port }), true);
  assert.equal(await via('127.0.0.2', '127.0.3.2'), true);
  // Removing protection from the port removes it from both.
  proxy.updateConfig({ protection: [{ port, protection: null }] });
  for (let i = 0; i < 3; i++) assert.equal(await via('127.0.0.1', '127.0.3.1'), true);
  for (let i = 0; i < 3; i++) assert.equal(await via('127.0.0.2', '127.0.3.1'), true);
});

test('the same host and port twice, and a specific address beside a wildcard, are ConfigErrors naming both', () => {
  const route = { sni: '', terminateTls: false, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 1 }] };
  let err;
  try {
    new RampartProxy({
      listeners: [
        { host: '127.0.0.1', port: 7443 },
        { host: '127.0.0.1', port: 7443 },
        { host: '0.0.0.0', port: 7443 },
        { host: '::', port: 7444 },
        { host: '127.0.0.1', port: 7444 },
        { host: '::1', port: 7445 },
        { host: '127.0.0.1', port: 7445, protection: { maxConcurrentPerIp: 1 } },
        { host: '127.0.0.2', port: 7445, protection: { maxConcurrentPerIp: 2 } },
      ],
      routes: [route],
    });
  } catch (e) {
    err = e;
  }
  assert.equal(err && err.code, 'ERR_RAMPART_CONFIG');
  assert.deepEqual(err.errors, [
    { path: 'listeners[1].port', message: '127.0.0.1:7443 is already bound by listeners[0] (the same host and port twice)' },
    {
      path: 'listeners[2].host',
      message:
        'listeners[0] (127.0.0.1:7443) and listeners[2] (0.0.0.0:7443) conflict on port 7443: the wildcard already takes every IPv4 address; bind specific addresses only, or the wildcard alone',
    },
    {
      path: 'listeners[4].host',
      message:
        'listeners[4] (127.0.0.1:7444) and listeners[3] ([::]:7444) conflict on port 7444: the wildcard already takes every IPv6 and, dual-stack, every IPv4 address; bind specific addresses only, or the wildcard alone',
    },
    {
      path: 'listeners[7].protection',
      message: 'differs from listeners[6].protection: the listeners on port 7445 share one policy (give it on one of them, or the same on each)',
    },
  ]);
});
