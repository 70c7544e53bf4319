'use strict';
// `npm start` serves a request from `curl -k --resolve` to the demo.
const test = require('node:test');
const assert = require('node:assert/strict');
const h = require('./helpers');
const { startDemo } = require('./helpers/demo');

test('npm start serves curl -k --resolve', async () => {
  const demo = await startDemo();
  const { port } = demo;
  try {
    assert.match(demo.out(), new RegExp(`curl -k --resolve localhost:${port}:127\\.0\\.0\\.1 https://localhost:${port}/`));
    const r = await h.run('curl', ['-sk', '--max-time', '5', '--resolve', `localhost:${port}:127.0.0.1`, `https://localhost:${port}/ping`]);
    assert.equal(r.code, 0, r.stderr.toString());
    assert.equal(r.stdout.toString(), 'hello from the Rampart demo upstream: GET /ping\n');
  } finally {
    await demo.stop();
  }
  assert.match(demo.out(), /stopped/);
});
