#!/usr/bin/env node
'use strict';
// Hot swap with 100k CIDRs: how long updateConfig takes to validate, compile and
// swap a blocklist of N entries, and the worst admission latency seen meanwhile by a client loop
// in a worker thread (connect from a blocklisted address → closed by the proxy at accept).
// Usage: node benches/hotswap.js [--entries 100000] [--rounds 5]
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');
const net = require('node:net');

/** The worker thread's connect loop: each sample is the time from connect() to the proxy's close, in ms. */
function probe() {
  const { port } = workerData;
  let stop = false;
  parentPort.on('message', (m) => {
    if (m === 'stop') stop = true;
  });
  const samples = [];
  const once = () =>
    new Promise((resolve) => {
      const t0 = process.hrtime.bigint();
      const s = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' });
      s.on('error', () => {});
      s.on('close', () => {
        samples.push([Number(process.hrtime.bigint() - t0) / 1e6, Date.now()]);
        resolve();
      });
    });
  (async () => {
    while (!stop) await once();
    parentPort.postMessage(samples);
  })();
}

// The worker thread only connects: it does not load the addon.
const { RampartProxy, generateSelfSignedCert } = isMainThread ? require(process.env.RAMPART_PATH || '..') : {};

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}

async function main() {
  const entries = arg('--entries', 100000);
  const rounds = arg('--rounds', 5);
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const port = srv.address().port;
  await new Promise((r) => srv.close(r));
  const [certChain, privateKey] = generateSelfSignedCert(['localhost']);
  const base = { blocklist: ['127.0.0.2'] };
  const proxy = new RampartProxy({
    workerThreads: 2,
    listeners: [{ host: '127.0.0.1', port, defaultCert: { certChain, privateKey }, protection: base }],
    routes: [{ sni: '', upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: 9 }] }],
  });
  await proxy.start();
  const list = ['127.0.0.2'];
  for (let i = 0; list.length < entries; i++) {
    list.push(`${10 + ((i >> 16) & 0x3f)}.${(i >> 8) & 0xff}.${i & 0xff}.0/24`);
    if (list.length < entries && i % 4 === 0) list.push(`2001:db8:${((i >> 16) & 0xffff).toString(16)}:${(i & 0xffff).toString(16)}::/64`);
  }
  const worker = new Worker(__filename, { workerData: { port } });
  await new Promise((r) => setTimeout(r, 500));
  const swaps = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = process.hrtime.bigint();
    proxy.updateConfig({ protection: [{ port, protection: { blocklist: r % 2 === 0 ? list : base.blocklist } }] });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    swaps.push({ entries: r % 2 === 0 ? list.length : 1, ms, at: Date.now() });
    await new Promise((res) => setTimeout(res, 300));
  }
  worker.postMessage('stop');
  const samples = await new Promise((r) => worker.once('message', r));
  await proxy.stop();
  const lat = samples.map((s) => s[0]).sort((a, b) => a - b);
  const q = (p) => lat[Math.min(lat.length - 1, Math.floor(p * lat.length))];
  const big = swaps
    .filter((s) => s.entries > 1)
    .map((s) => s.ms)
    .sort((a, b) => a - b);
  console.log(
    `updateConfig with ${list.length} CIDRs (validate + compile + swap, JS call included): median ${big[Math.floor(big.length / 2)].toFixed(1)} ms, min ${big[0].toFixed(1)}, max ${big[big.length - 1].toFixed(1)}`
  );
  console.log(
    `admission probe (connect → close from a blocklisted address, ${lat.length} samples across the swaps): p50 ${q(0.5).toFixed(3)} ms, p99 ${q(0.99).toFixed(3)} ms, max ${lat[lat.length - 1].toFixed(3)} ms`
  );
}

if (!isMainThread) {
  probe();
} else {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
