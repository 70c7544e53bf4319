'use strict';
// What one node costs Redis: one Rampart node (child process) with clusterRateLimit and shareBans
// on a real redis-server (started here on a free port, killed at the end), driven at RATE new
// TCP connections per second for SECS seconds from CLIENTS loopback addresses (each connection is
// admitted at accept, then closed by the client). Redis's own `INFO commandstats` before and after
// give the commands per second, per command, and per 1,000 new connections per second.
// Usage: node benches/cluster-cost.js [RATE=1000] [SECS=10] [CLIENTS=100] [LIMIT=20]
//   LIMIT: clusterRateLimit.connectionsPerSecond per client (lease = ceil(LIMIT / 10)).
const net = require('node:net');
const os = require('node:os');
const h = require('../__tests__/helpers');
const { startRedis, forkClusterNode } = require('../__tests__/helpers/cluster');

const RATE = Number(process.argv[2] || 1000);
const SECS = Number(process.argv[3] || 10);
const CLIENTS = Number(process.argv[4] || 100);
const LIMIT = Number(process.argv[5] || 20);

async function node(redisPort, port, upstreamPort) {
  const opts = {
    host: '127.0.0.31',
    port,
    upstreamPort,
    protection: {
      clusterRateLimit: { connectionsPerSecond: LIMIT, burst: LIMIT * 2 },
      rateLimit: { connectionsPerSecond: LIMIT * 4 },
      penaltyBox: { durationMs: 2000 },
    },
    cluster: { redis: { url: `redis://127.0.0.1:${redisPort}`, keyPrefix: 'rcost:' }, nodeId: 'cost-0', shareBans: true },
  };
  const { child, call, stop } = await forkClusterNode(opts);
  return { child, call, stop, host: opts.host };
}

/** `INFO commandstats` as { command: calls }. */
async function commandstats(redisPort) {
  const out = (await h.run('redis-cli', ['-p', String(redisPort), 'INFO', 'commandstats'])).stdout.toString();
  const calls = {};
  for (const m of out.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[m[1]] = Number(m[2]);
  return calls;
}

function connectOnce(host, port, localAddress) {
  return new Promise((resolve) => {
    const s = net.connect({ host, port, localAddress });
    s.on('error', () => resolve(false));
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
  });
}

(async () => {
  const port = await h.freePort();
  const echo = await h.echoServer();
  const redis = await startRedis();
  const redisPort = redis.port;
  try {
    const a = await node(redisPort, port, echo.address().port);
    const before = await commandstats(redisPort);
    const t0 = performance.now();
    let sent = 0;
    let k = 0;
    const inflight = new Set();
    // Paced in 10 ms slots: RATE / 100 connections per slot, round-robin over CLIENTS addresses.
    while (performance.now() - t0 < SECS * 1000) {
      const due = Math.floor(((performance.now() - t0) / 1000) * RATE);
      while (sent < due) {
        const ip = `127.0.${40 + Math.floor((k % CLIENTS) / 250)}.${((k % CLIENTS) % 250) + 1}`;
        k++;
        sent++;
        const p = connectOnce(a.host, port, ip).finally(() => inflight.delete(p));
        inflight.add(p);
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    await Promise.all(inflight);
    const secs = (performance.now() - t0) / 1000;
    const after = await commandstats(redisPort);
    const m = await a.call('metrics');
    const perCmd = {};
    let total = 0;
    for (const [c, n] of Object.entries(after)) {
      if (c === 'info') continue;
      const d = n - (before[c] || 0);
      if (d > 0) {
        perCmd[c] = Math.round((d / secs) * 10) / 10;
        total += d;
      }
    }
    const connPerSec = sent / secs;
    console.log(
      JSON.stringify({
        connectionsPerSecond: Math.round(connPerSec),
        clients: CLIENTS,
        clusterRateLimit: LIMIT,
        lease: Math.ceil(LIMIT / 10),
        seconds: Math.round(secs * 10) / 10,
        accepted: m.listeners[0].accepted,
        refusedByReason: m.listeners[0].blockedByReason,
        redisCommandsPerSecond: Math.round((total / secs) * 10) / 10,
        perCommand: perCmd,
        redisCommandsPerSecondPer1000ConnPerSecond: Math.round((total / secs / connPerSec) * 1000 * 10) / 10,
        cluster: m.cluster,
        loadAverage: os.loadavg().map((x) => Math.round(x * 100) / 100),
      })
    );
    await a.call('stop');
    a.child.kill();
  } finally {
    redis.kill();
    await h.closeServer(echo);
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
