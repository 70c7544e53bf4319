'use strict';
// Child process for the XDP end-to-end spec, run inside the proxy's network namespace
// (`ip netns exec <ns> node xdp-proxy.js <json>`). Starts an echo upstream, a plain TCP server on
// an unprotected port, and Rampart on the protected port; attaches XDP to the veth end; then
// answers one JSON command per stdin line with one JSON line on stdout. Optional: `host` (default
// 0.0.0.0) and `cluster` (the ProxyConfig field, for the cluster spec).
const dgram = require('node:dgram');
const net = require('node:net');
const readline = require('node:readline');
const { RampartProxy, generateSelfSignedCert } = require('../..');

async function main() {
  const opts = JSON.parse(process.argv[2]);
  const echo = net.createServer((s) => {
    s.on('error', () => {});
    s.pipe(s);
  });
  await new Promise((r) => echo.listen(0, '127.0.0.1', r));
  const plain = net.createServer((s) => {
    s.on('error', () => {});
    s.end('plain-ok');
  });
  await new Promise((r) => plain.listen(opts.plainPort, '0.0.0.0', r));
  // UDP receivers on the protected and the unprotected port: what reaches the proxy's stack.
  const udp = {};
  for (const port of [opts.port, opts.plainPort]) {
    const sock = dgram.createSocket('udp4');
    udp[port] = { datagrams: 0, bytes: 0, sock };
    sock.on('message', (m) => {
      udp[port].datagrams += 1;
      udp[port].bytes += m.length;
    });
    await new Promise((r) => sock.bind(port, '0.0.0.0', r));
  }
  const [certChain, privateKey] = generateSelfSignedCert(['xdp.test']);
  const proxy = new RampartProxy({
    workerThreads: 2,
    listeners: [{ host: opts.host || '0.0.0.0', port: opts.port, defaultCert: { certChain, privateKey }, protection: opts.protection }],
    routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: echo.address().port }] }],
    cluster: opts.cluster,
  });
  const events = [];
  proxy.on('blocked', (e) => events.push(e));
  const bans = [];
  proxy.on('ban', (e) => bans.push(e));
  await proxy.start();
  const commands = {
    attach: (a) => proxy.attachXdp(a),
    status: () => proxy.xdpStatus(),
    blocked: (a) => proxy.blockedIps(a),
    metrics: () => proxy.metrics(),
    events: () => events.splice(0),
    bans: () => bans,
    blockIp: (a) => proxy.blockIp(a.cidr, a.opts),
    update: (a) => proxy.updateConfig(a),
    udp: () => Object.fromEntries(Object.entries(udp).map(([p, u]) => [p, { datagrams: u.datagrams, bytes: u.bytes }])),
    detach: () => proxy.detachXdp(),
    exit: async () => {
      await proxy.stop();
      echo.close();
      plain.close();
      for (const u of Object.values(udp)) u.sock.close();
      setImmediate(() => process.exit(0));
      return true;
    },
  };
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', async (line) => {
    const { id, cmd, args } = JSON.parse(line);
    try {
      const result = await commands[cmd](args);
      process.stdout.write(`${JSON.stringify({ id, result: result === undefined ? null : result })}\n`);
    } catch (e) {
      process.stdout.write(`${JSON.stringify({ id, error: String(e && e.message) })}\n`);
    }
  });
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
}

main().catch((e) => {
  process.stdout.write(`${JSON.stringify({ fatal: String(e && e.stack) })}\n`);
  process.exit(1);
});
