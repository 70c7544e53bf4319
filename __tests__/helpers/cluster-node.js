'use strict';
// One Rampart node of the cluster spec, as a child process (`fork`): argv[2] is JSON
// `{ host, port, upstreamPort, cluster, protection }`; it creates and starts a proxy with that
// cluster config, then answers IPC commands `{ id, cmd, args }` with `{ id, result | error }`.
// It reports `{ ready: true }` once started.
const { RampartProxy } = require('../..');
const { selfSigned } = require('./index');

const opts = JSON.parse(process.argv[2]);
const events = { blocked: [], error: [] };
let proxy;

const commands = {
  blockIp: ([cidr, o]) => proxy.blockIp(cidr, o),
  unblockIp: ([cidr, o]) => proxy.unblockIp(cidr, o),
  blockedIps: ([o]) => proxy.blockedIps(o),
  metrics: () => proxy.metrics(),
  prometheus: () => proxy.prometheus(),
  restart: async () => {
    await proxy.stop();
    await proxy.start();
    return true;
  },
  events: () => events,
  clearEvents: () => {
    events.blocked.length = 0;
    events.error.length = 0;
    return true;
  },
  stop: async () => {
    await proxy.stop();
    return true;
  },
};

process.on('message', async ({ id, cmd, args }) => {
  try {
    const result = await commands[cmd](args || []);
    process.send({ id, result: result === undefined ? null : result });
  } catch (e) {
    process.send({ id, error: `${e.code || ''} ${e.message}` });
  }
});

(async () => {
  try {
    proxy = new RampartProxy({
      listeners: [{ host: opts.host, port: opts.port, defaultCert: selfSigned(), protection: opts.protection }],
      routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: opts.upstreamPort }] }],
      workerThreads: 1,
      cluster: opts.cluster,
    });
    proxy.on('blocked', (e) => events.blocked.push(e));
    proxy.on('error', (e) => events.error.push(e));
    await proxy.start();
    process.send({ ready: true });
  } catch (e) {
    process.send({ fatal: `${e.code || ''} ${e.message}` });
  }
})();
