'use strict';
// explain(ip): one address across every tier, through real connections, and the admin route.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');

test('explain(ip) names the check that refuses the next connection: box after a rate limit, known-good, dynamic block, blocklist', async (t) => {
  const p = await h.protectedProxy({
    protection: {
      rateLimit: { connectionsPerSecond: 1, burst: 2 },
      penaltyBox: { durationMs: 60000 },
      maxConcurrentPerIp: 10,
      blocklist: ['127.0.9.0/24'],
    },
  });
  t.after(() => p.close());
  const fresh = p.proxy.explain('127.0.0.20');
  assert.equal(fresh.ip, '127.0.0.20');
  assert.equal(fresh.kernel, null);
  assert.equal(fresh.listeners.length, 1);
  assert.deepEqual(
    { port: fresh.listeners[0].port, verdict: fresh.listeners[0].verdict, tracked: fresh.listeners[0].tracked, penaltyBox: fresh.listeners[0].penaltyBox },
    { port: p.port, verdict: null, tracked: false, penaltyBox: null }
  );

  // Two connections use the burst (and mark the client known-good: bytes moved both ways).
  assert.equal(await h.admitted(p.port, '127.0.0.21'), true);
  assert.equal(await h.admitted(p.port, '127.0.0.21'), true);
  const used = p.proxy.explain('127.0.0.21').listeners[0];
  assert.equal(used.tracked, true);
  assert.equal(used.verdict, 'rate_limited');
  assert.ok(used.retryAfterMs > 0 && used.retryAfterMs <= 1000, String(used.retryAfterMs));
  assert.ok(used.knownGoodMs > 0, JSON.stringify(used));
  // The third is refused rate_limited and boxes the client: explain now says penalty_boxed.
  assert.equal(await h.admitted(p.port, '127.0.0.21'), false);
  const boxed = p.proxy.explain('127.0.0.21').listeners[0];
  assert.equal(boxed.verdict, 'penalty_boxed');
  assert.equal(boxed.penaltyBox.level, 0);
  // The box deadline is kept in whole ms and rounded up: at most durationMs + 1 left.
  assert.ok(boxed.penaltyBox.remainingMs > 55000 && boxed.penaltyBox.remainingMs <= 60001, JSON.stringify(boxed.penaltyBox));
  assert.equal(boxed.knownGoodMs, null, 'a boxed client loses its known-good mark');
  assert.deepEqual(p.proxy.blockedIps().penaltyBoxed, ['127.0.0.21']);

  p.proxy.blockIp('127.0.0.0/29', { reason: 'INC-42', ttlMs: 60000 });
  const dyn = p.proxy.explain('127.0.0.5').listeners[0];
  assert.equal(dyn.verdict, 'dynamic_blocked');
  assert.deepEqual(dyn.dynamicBlocks, [{ cidr: '127.0.0.0/29', port: null, reason: 'INC-42' }]);
  assert.equal(p.proxy.explain('::ffff:127.9.9.9').listeners[0].verdict, null);
  assert.equal(p.proxy.explain('127.0.9.1').listeners[0].verdict, 'cidr_blocked');
  assert.equal(p.proxy.explain('127.0.9.1').listeners[0].blocklisted, true);
  assert.equal(p.proxy.explain('::ffff:127.0.9.1').ip, '127.0.9.1');
  assert.equal(p.proxy.explain('2001:db8:1:2::7').listeners[0].key, '2001:db8:1:2::/64');
  // Asking changes nothing: an address never seen is still untracked.
  assert.equal(p.proxy.explain('127.0.0.20').listeners[0].tracked, false);
});

test('explain(ip) refuses anything but one address with a ConfigError at ip', async (t) => {
  const p = await h.protectedProxy({});
  t.after(() => p.close());
  for (const bad of ['10.0.0.0/8', 'localhost', '', '1.2.3.4.5']) {
    assert.throws(
      () => p.proxy.explain(bad),
      (e) => {
        assert.equal(e.code, 'ERR_RAMPART_CONFIG');
        assert.deepEqual(
          e.errors.map((x) => x.path),
          ['ip']
        );
        assert.equal(e.errors[0].message, `must be an IPv4 or IPv6 address (no /length, no zone), got ${JSON.stringify(bad)}`);
        return true;
      }
    );
  }
  // A huge input is quoted cut to 64 characters, never echoed whole.
  assert.throws(
    () => p.proxy.explain('1'.repeat(100000)),
    (e) => {
      assert.equal(e.errors[0].message, `must be an IPv4 or IPv6 address (no /length, no zone), got "${'1'.repeat(64)}"…`);
      return true;
    }
  );
  assert.throws(
    () => p.proxy.explain(7),
    (e) => e.errors[0].path === 'ip' && e.errors[0].message === 'must be a string, got number'
  );
});
