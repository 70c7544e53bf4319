'use strict';
// `npm start` serves a request from `curl -k --resolve` to the demo.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn } = require('node:child_process');
const h = require('./helpers');

test('npm start serves curl -k --resolve', async () => {
  const port = await h.freePort();
  const child = spawn('npm', ['start', '--silent'], {
    cwd: path.join(__dirname, '..'),
    env: { ...process.env, RAMPART_DEMO_PORT: String(port) },
    detached: true,
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  try {
    await h.waitFor(() => out.includes('Ctrl-C stops'), { timeoutMs: 20000, what: 'the demo to print its instructions' });
    assert.match(out, new RegExp(`curl -k --resolve localhost:${port}:127\\.0\\.0\\.1 https://localhost:${port}/`));
    const r = await h.run('curl', ['-sk', '--max-time', '5', '--resolve', `localhost:${port}:127.0.0.1`, `https://localhost:${port}/ping`]);
    assert.equal(r.code, 0, r.stderr.toString());
    assert.equal(r.stdout.toString(), 'hello from the Rampart demo upstream: GET /ping\n');
  } finally {
    process.kill(-child.pid, 'SIGTERM');
    await new Promise((r) => child.once('close', r));
  }
  assert.match(out, /stopped/);
});
