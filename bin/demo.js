#!/usr/bin/env node
'use strict';
// `npm start`: Rampart on 127.0.0.1:8443 (RAMPART_DEMO_PORT overrides) with a generated
// self-signed certificate and protection on, in front of a tiny built-in HTTP upstream.
// RAMPART_DEMO_PENALTY_MS sets the penalty box (default 60000 ms). blockedIps() is printed each
// time it changes, including when it empties again. The incident page (the admin API's `GET /ui`,
// read-only, no token) is on 127.0.0.1:9901 (RAMPART_DEMO_ADMIN_PORT overrides; 0: any free port).
const http = require('node:http');
const { RampartProxy, generateSelfSignedCert } = require('..');
const { startAdmin } = require('../server/admin');
const { version } = require('../package.json');

/** The admin API's view of a proxy run by hand (the server's Supervisor runs one from a file). */
function demoSupervisor(proxy, ports) {
  const startedAt = new Date();
  return {
    running: true,
    reloadedAt: startedAt,
    ports: () => ports,
    adminConfig: () => null,
    token: () => null,
    metrics: () => proxy.metrics(),
    prometheus: () => proxy.prometheus(),
    blockedIps: (opts) => proxy.blockedIps(opts),
    explain: (ip) => proxy.explain(ip),
    xdpStatus: () => ({ ...proxy.xdpStatus(), configured: null, lastError: null }),
  };
}

async function main() {
  const port = Number(process.env.RAMPART_DEMO_PORT || 8443);
  const penaltyMs = Number(process.env.RAMPART_DEMO_PENALTY_MS || 60000);
  const upstream = http.createServer((req, res) => {
    res.setHeader('content-type', 'text/plain');
    res.end(`hello from the Rampart demo upstream: ${req.method} ${req.url}\n`);
  });
  await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
  const [certChain, privateKey] = generateSelfSignedCert(['localhost', 'demo.localhost', '127.0.0.1']);
  const protection = {
    rateLimit: { connectionsPerSecond: 20, burst: 40 },
    sustained: { connectionsPerMinute: 600 },
    penaltyBox: { durationMs: penaltyMs },
    maxConcurrentPerIp: 64,
    tlsHandshakeTimeoutMs: 5000,
  };
  const proxy = new RampartProxy({
    listeners: [{ host: '127.0.0.1', port, defaultCert: { certChain, privateKey }, protection }],
    routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: upstream.address().port }] }],
  });
  proxy.on('blocked', (e) => console.log(`blocked ${e.ip} on :${e.port}: ${e.reason}`));
  proxy.on('blockedSummary', (s) => console.log(`blockedSummary: ${JSON.stringify(s)}`));
  proxy.on('error', (e) => console.log(`error: ${e.code}: ${e.message}`));
  await proxy.start();
  const adminPort = Number(process.env.RAMPART_DEMO_ADMIN_PORT ?? 9901);
  const quiet = { event: (name, fields) => name === 'error' && console.log(`admin API error: ${fields.message}`) };
  let admin = null;
  try {
    admin = await startAdmin({ admin: { host: '127.0.0.1', port: adminPort }, supervisor: demoSupervisor(proxy, [port]), log: quiet, version });
  } catch (e) {
    console.log(`incident page not started: 127.0.0.1:${adminPort}: ${e.message} (set RAMPART_DEMO_ADMIN_PORT to another port, 0 for any)`);
  }
  console.log(`Rampart demo listening on https://localhost:${port} (self-signed certificate)`);
  if (admin) console.log(`  incident page: ${admin.addresses[0]}/ui (refusals, boxed addresses, upstream health; read-only)`);
  console.log(`  try:   curl -k --resolve localhost:${port}:127.0.0.1 https://localhost:${port}/`);
  console.log(`  flood: seq 100 | xargs -P 8 -I{} curl -sk -o /dev/null --resolve localhost:${port}:127.0.0.1 https://localhost:${port}/`);
  console.log('  watch: blockedIps() is printed whenever it changes (checked every second), also when it empties; Ctrl-C stops');
  let last = JSON.stringify(proxy.blockedIps());
  const timer = setInterval(() => {
    const now = proxy.blockedIps();
    const b = JSON.stringify(now);
    if (b === last) return;
    last = b;
    const empty = Object.values(now).every((list) => list.length === 0);
    console.log(`blockedIps(): ${b}${empty ? '  (nothing blocked now)' : ''}`);
  }, 1000);
  const shutdown = async () => {
    clearInterval(timer);
    if (admin) await admin.close();
    await proxy.stop({ drainMs: 1000 });
    upstream.close();
    console.log('stopped');
    process.exit(0);
  };
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
