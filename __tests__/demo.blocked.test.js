'use strict';
// The demo prints blockedIps() each time it changes: when a flood boxes 127.0.0.1, and again when
// the box expires and the lists are empty.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');
const { startDemo } = require('./helpers/demo');

/** The `blockedIps(): {...}` lines printed so far, parsed. */
function printed(out) {
  return out
    .split('\n')
    .filter((l) => l.startsWith('blockedIps(): '))
    .map((line) => {
      const lists = JSON.parse(line.slice('blockedIps(): '.length).replace(/ +\(nothing blocked now\)$/, ''));
      return { line, lists, empty: Object.values(lists).every((l) => l.length === 0) };
    });
}

test('npm start prints blockedIps() when 127.0.0.1 is boxed and again when it is empty', async () => {
  const demo = await startDemo({ RAMPART_DEMO_PENALTY_MS: '1500' });
  const { port, out } = demo;
  try {
    assert.doesNotMatch(out(), /blockedIps\(\):/, 'nothing changed yet, nothing printed');
    // 80 connections at once: the burst of 40 is admitted, the excess is refused and boxes the IP.
    const probes = await Promise.all(Array.from({ length: 80 }, () => h.tcpProbe({ port, timeoutMs: 200 })));
    assert.ok(probes.includes('closed'), `some connections were refused: ${probes.join(',')}`);
    const waitPrinted = (fn, what) =>
      h
        .waitFor(() => fn(printed(out())), { timeoutMs: 10000, what })
        .catch((e) => {
          throw new Error(`${e.message}; the demo printed:\n${out()}`);
        });
    await waitPrinted((p) => p.some((b) => b.lists.penaltyBoxed.includes('127.0.0.1')), 'blockedIps() with 127.0.0.1 boxed');
    await waitPrinted((p) => p.length > 1 && p.at(-1).empty, 'blockedIps() printed empty after the box expired');
    const last = printed(out()).at(-1);
    assert.deepEqual(last.lists, { rateLimited: [], concurrencyLimited: [], cidrBlocklist: [], penaltyBoxed: [], dynamicBlocklist: [] });
    assert.match(last.line, /\(nothing blocked now\)$/);
  } finally {
    await demo.stop();
  }
  assert.match(out(), /stopped/);
});
