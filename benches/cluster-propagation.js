'use strict';
// Ban propagation A → B over a real redis-server (started here on a free port, killed at the end):
// node A blocks N distinct addresses (blockIp, 60 s TTL) one by one, 2 ms apart; node B's
// metrics().cluster.propagationDelayMs gives p50/p99 over the newest 1024 received messages
// (sender's wall clock to receiver's, same host here). Usage: node benches/cluster-propagation.js [N]
const h = require('../__tests__/helpers');
const { startRedis, forkClusterNode } = require('../__tests__/helpers/cluster');

const N = Number(process.argv[2] || 1000);

async function node(i, redisPort, port, upstreamPort) {
  const opts = {
    host: `127.0.0.${21 + i}`,
    port,
    upstreamPort,
    cluster: { redis: { url: `redis://127.0.0.1:${redisPort}`, keyPrefix: 'rbench:' }, nodeId: `bench-${i}` },
  };
  const { child, call, stop } = await forkClusterNode(opts);
  return { child, call, stop };
}

(async () => {
  const port = await h.freePort();
  const echo = await h.echoServer();
  const redis = await startRedis();
  const redisPort = redis.port;
  try {
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
    redis.kill();
    await h.closeServer(echo);
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
