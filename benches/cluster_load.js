'use strict';
// Loading bans from Redis: a real redis-server (started here on a free port, killed at the end) is
// filled with N ban keys of another node (`redis-cli --pipe`: SET key value PX ttl), then a node
// is started (child process) and timed from its fork until `metrics().cluster.bansReceived` is N;
// its RSS is compared with a node started the same way against an empty key prefix. N defaults to
// 100k, 300k and 1M. KIND: `block` (default; blockIp entries, /32 addresses) or `box`.
// Usage: node benches/cluster_load.js [N ...]   (KIND=box node benches/cluster_load.js ...)
const fs = require('node:fs');
const { spawn } = require('node:child_process');
const h = require('../__tests__/helpers');
const { startRedis, forkClusterNode } = require('../__tests__/helpers/cluster');

const SIZES = process.argv.slice(2).map(Number);
const KIND = process.env.KIND || 'block';
const PREFIX = 'rload:';
const TTL_MS = 3_600_000;

/** One RESP command. */
function resp(args) {
  let s = `*${args.length}\r\n`;
  for (const a of args) s += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
  return s;
}

/** Fills `n` ban keys of node `bench-origin` through `redis-cli --pipe`. */
function fill(redis, n) {
  return new Promise((resolve, reject) => {
    const cli = spawn('redis-cli', ['-p', String(redis.port), '--pipe'], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    cli.stdout.on('data', (d) => (out += d));
    cli.on('error', reject);
    cli.on('close', (code) => (code === 0 ? resolve(out.trim().split('\n').pop()) : reject(new Error(`redis-cli --pipe: ${code} ${out}`))));
    const port = KIND === 'block' ? null : 8443;
    let i = 0;
    const write = () => {
      while (i < n) {
        let chunk = '';
        for (let j = 0; j < 1000 && i < n; j++, i++) {
          const net = `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}/32`;
          const key = `${PREFIX}{bans}:${KIND}:${port === null ? '*' : port}:${net}`;
          const val = JSON.stringify({ op: 'ban', node: 'bench-origin', kind: KIND, net, port, ttlMs: TTL_MS, sentUs: 0 });
          chunk += resp(['SET', key, val, 'PX', String(TTL_MS)]);
        }
        if (!cli.stdin.write(chunk)) return cli.stdin.once('drain', write);
      }
      cli.stdin.end();
    };
    write();
  });
}

const rssKb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);

async function node(redis, keyPrefix, port, upstreamPort) {
  const opts = { host: '127.0.0.41', port, upstreamPort, cluster: { redis: { url: redis.url, keyPrefix, commandTimeoutMs: 5000 }, nodeId: 'bench-loader' } };
  return forkClusterNode(opts, { connectedWithinMs: 60000 });
}

(async () => {
  const sizes = SIZES.length ? SIZES : [100_000, 300_000, 1_000_000];
  const port = await h.freePort();
  const echo = await h.echoServer();
  const redis = await startRedis();
  try {
    // Baseline: the same node with nothing to load.
    const base = await node(redis, 'rempty:', port, echo.address().port);
    await new Promise((r) => setTimeout(r, 1000));
    const baseKb = rssKb(base.child.pid);
    await base.stop();
    for (const n of sizes) {
      await redis.cli('FLUSHALL');
      const filled = await fill(redis, n);
      const t0 = performance.now();
      const nd = await node(redis, PREFIX, port, echo.address().port);
      let m;
      await h.waitFor(
        async () => {
          m = (await nd.call('metrics')).cluster;
          return m.bansReceived >= n;
        },
        { timeoutMs: 1_800_000, intervalMs: 50, what: `${n} bans loaded` }
      );
      const s = (performance.now() - t0) / 1000;
      const kb = rssKb(nd.child.pid);
      console.log(
        JSON.stringify({
          kind: KIND,
          bans: n,
          received: m.bansReceived,
          seconds: +s.toFixed(2),
          keysPerSecond: Math.round(n / s),
          rssDeltaMB: +((kb - baseKb) / 1024).toFixed(1),
          redis: filled,
        })
      );
      await nd.stop();
    }
  } finally {
    redis.kill();
    await h.closeServer(echo);
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
