#!/usr/bin/env node
'use strict';
// Runs one RampartProxy in its own process so `npm run bench` can read its RSS and CPU time from
// /proc/<pid>. Started by benches/run.js with an IPC channel:
//   node benches/rampart-server.js <config.json>
// The config is a ProxyConfig whose certificate fields may be `{ file: '/path.pem' }` (read here).
// Messages: parent → { cmd: 'metrics' } → child replies { metrics }; { cmd: 'stop' } stops and
// exits. The child sends { ready: true, pid } once listening, { error } if start() rejects, and
// exits when the parent goes away. No 'blocked'/'error' listener is attached: the benchmark
// measures the proxy, not event delivery to JS.
const fs = require('node:fs');
const path = require('node:path');

const RAMPART_PATH = process.env.RAMPART_PATH || path.resolve(__dirname, '..');
const { RampartProxy } = require(RAMPART_PATH);

function loadFiles(v) {
  if (Array.isArray(v)) return v.map(loadFiles);
  if (v && typeof v === 'object') {
    if (typeof v.file === 'string' && Object.keys(v).length === 1) return fs.readFileSync(v.file, 'utf8');
    const out = {};
    for (const [k, x] of Object.entries(v)) out[k] = loadFiles(x);
    return out;
  }
  return v;
}

async function main() {
  const config = loadFiles(JSON.parse(fs.readFileSync(process.argv[2], 'utf8')));
  const proxy = new RampartProxy(config);
  try {
    await proxy.start();
  } catch (e) {
    process.send({ error: `${e.code || ''} ${e.message}` });
    process.exit(1);
  }
  process.on('message', async (m) => {
    if (m && m.cmd === 'metrics') process.send({ metrics: proxy.metrics() });
    if (m && m.cmd === 'stop') {
      await proxy.stop();
      process.exit(0);
    }
  });
  process.on('disconnect', () => process.exit(0));
  process.send({ ready: true, pid: process.pid });
}

main().catch((e) => {
  if (process.send) process.send({ error: e.errors ? JSON.stringify(e.errors) : String(e && e.stack) });
  process.exit(1);
});
