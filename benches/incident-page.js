#!/usr/bin/env node
'use strict';
// `npm run screenshot:ui`: docs/incident-page.png, the admin API's incident page during a small
// flood. Starts `rampart serve` (a TLS listener with rate limits and a penalty box in front of an
// echo upstream), runs 30 s of traffic from loopback addresses (127.0.0.1 well-behaved at about
// 4/s; 127.0.0.10-17 in staggered bursts, boxed in turn), blocks 203.0.113.0/24 through
// `POST /block`, then has headless Chromium (`apt-get install chromium`) screenshot the page.
// Usage: node benches/incident-page.js [--out docs/incident-page.png] [--seconds 30]
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const h = require('../__tests__/helpers');
const s = require('../__tests__/helpers/server');

const arg = (name, dflt) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const out = path.resolve(arg('out', path.join(__dirname, '..', 'docs', 'incident-page.png')));
const seconds = Number(arg('seconds', 30));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** TLS connections from `ip` every `gapMs` until `until` (ms epoch). */
async function loop(port, ip, gapMs, until) {
  while (Date.now() < until) {
    await s.tlsAttempt(port, { localAddress: ip, timeoutMs: 1000 });
    if (gapMs) await sleep(gapMs);
  }
}

async function main() {
  if (!h.haveTool('chromium')) throw new Error('chromium not found on PATH (apt-get install chromium)');
  const echo = await h.echoServer();
  const { file, port, api } = await s.configDir(echo.address().port, (doc) => {
    doc.proxy.listeners[0].protection = {
      rateLimit: { connectionsPerSecond: 5, burst: 10 },
      penaltyBox: { durationMs: 120000 },
      maxConcurrentPerIp: 4,
    };
  });
  const child = await s.ServerChild.serve(file);
  try {
    const end = Date.now() + seconds * 1000;
    const traffic = [loop(port, '127.0.0.1', 250, end)];
    for (let i = 0; i < 8; i++) {
      const start = Date.now() + (i * seconds * 1000) / 10;
      traffic.push(sleep(start - Date.now()).then(() => loop(port, `127.0.0.${10 + i}`, 20, Math.min(end, start + 4000))));
    }
    await sleep((seconds * 1000) / 2);
    const block = await s.admin(api, 'POST', '/block', { token: s.TOKEN, body: { cidr: '203.0.113.0/24', ttlMs: 3600000, reason: 'INC-1 scanner range' } });
    if (block.status !== 204) throw new Error(`POST /block: ${block.status} ${block.text}`);
    await Promise.all(traffic);
    await sleep(1500); // the last second sampled
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'rampart-chromium-'));
    const args = [
      '--headless',
      '--disable-gpu',
      '--no-first-run',
      '--hide-scrollbars',
      `--user-data-dir=${profile}`,
      '--window-size=1300,780',
      '--virtual-time-budget=3000',
      `--screenshot=${out}`,
      `http://oncall:${s.TOKEN}@127.0.0.1:${api.port}/ui`,
    ];
    if (process.getuid && process.getuid() === 0) args.unshift('--no-sandbox');
    const r = await h.run('chromium', args, { timeoutMs: 90000 });
    fs.rmSync(profile, { recursive: true, force: true });
    if (r.code !== 0 || !fs.existsSync(out)) throw new Error(`chromium exited ${r.code}: ${r.stderr.toString().slice(-2000)}`);
    console.log(`incident-page: wrote ${out} (${fs.statSync(out).size} bytes)`);
  } finally {
    await child.close();
    await s.cleanup();
    await h.closeServer(echo);
  }
}

main().catch((e) => {
  console.error(`incident-page: ${e.message}`);
  process.exit(1);
});
