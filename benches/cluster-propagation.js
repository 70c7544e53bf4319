'use strict';
// Ban propagation A → B over a real redis-server (started here on a free port, killed at the end):
// node A blocks N distinct addresses (blockIp, 60 s TTL) one by one, 2 ms apart; node B's
// metrics().cluster.propagationDelayMs gives p50/p99 over the newest 1024 received messages
// (sender's wall clock to receiver's, same host here). Usage: node benches/cluster-propagation.js [N]
const path = require('node:path');
const { spawn, fork } = require('node:child_process');
const h = require('../__tests__/helpers');

const N = Number(process.argv[2] || 1000);

async function node(i, redisPort, port, upstreamPort) {
  const opts = {
    host: `127.0.0.${21 + i}`,
    port,
    upstreamPort,
    cluster: { redis: { url: `redis://127.0.0.1:${redisPort}`, keyPrefix: 'rbench:' }, nodeId: `bench-${i}` },
  };
  const child = fork(path.join(__dirname, '..', '__tests__', 'helpers', 'cluster-node.js'), [JSON.stringify(opts)]);
  const waiting = new Map();
  let n = 0;
  await new Promise((resolve, reject) =>
    child.on('message', (m) => {
      if (m.ready) return resolve();
      if (m.fatal) return reject(new Error(m.fatal));
      const w = waiting.get(m.id);
      waiting.delete(m.id);
      if (m.error) w.reject(new Error(m.error));
      else w.resolve(m.result);
    })
  );
  const call = (cmd, ...args) =>
    new Promise((resolve, reject) => {
      const id = ++n;
      waiting.set(id, { resolve, reject });
      child.send({ id, cmd, args });
    });
  await h.waitFor(async () => (await call('metrics')).cluster.connected, { what: 'connected' });
  return { child, call };
}

(async () => {
  const redisPort = await h.freePort();
  const port = await h.freePort();
  const echo = await h.echoServer();
  const redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  try {
    await h.waitFor(async () => (await h.run('redis-cli', ['-p', String(redisPort), 'PING'])).stdout.toString().trim() === 'PONG', { what: 'redis up' });
    const a = await node(0, redisPort, port, echo.address().port);
    const b = await node(1, redisPort, port, echo.address().port);
    for (let i = 0; i < N; i++) {
      await a.call('blockIp', `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, { ttlMs: 60000 });
      await new Promise((r) => setTimeout(r, 2));
    }
    await h.waitFor(async () => (await b.call('metrics')).cluster.bansReceived === N, { timeoutMs: 20000, what: 'all received' });
    const m = (await b.call('metrics')).cluster;
    console.log(JSON.stringify({ bans: N, received: m.bansReceived, propagationDelayMs: m.propagationDelayMs }));
    for (const n of [a, b]) {
      await n.call('stop');
      n.child.kill();
    }
  } finally {
    redis.kill('SIGKILL');
    await h.closeServer(echo);
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
