'use strict';
// The cluster specs' and benches' real parts: a redis-server on a free port (killed by the
// caller) and Rampart nodes as child processes (helpers/cluster-node.js) driven over IPC.
// `netns` runs either inside a network namespace made by the caller (helpers/netns.js).
const path = require('node:path');
const { spawn, fork } = require('node:child_process');
const h = require('.');

const inNetns = (netns, cmd, args) => (netns ? ['ip', ['netns', 'exec', netns, cmd, ...args]] : [cmd, args]);

/**
 * Starts `redis-server` on a free port of 127.0.0.1 (no persistence) and waits for its PONG.
 * `{ port, url, proc, cli(...args[, runOptions]) → run result (--raw), signal(sig), kill() }`.
 */
async function startRedis({ netns } = {}) {
  const port = await h.freePort();
  const proc = spawn(...inNetns(netns, 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']), {
    stdio: 'ignore',
  });
  // A last argument that is an object is run()'s options (e.g. `{ input }` for `redis-cli -x`).
  const cli = (...args) => {
    const o = typeof args[args.length - 1] === 'object' ? args.pop() : {};
    return h.run(...inNetns(netns, 'redis-cli', ['-p', String(port), '--raw', ...args]), { timeoutMs: 5000, ...o });
  };
  const redis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    proc,
    cli,
    signal: (sig) => proc.kill(sig),
    kill: () => {
      proc.kill('SIGCONT');
      proc.kill('SIGKILL');
    },
  };
  try {
    await h.waitFor(async () => (await cli('PING')).stdout.toString().trim() === 'PONG', { timeoutMs: 5000, what: 'redis-server up' });
  } catch (e) {
    redis.kill();
    throw e;
  }
  return redis;
}

/**
 * Forks a node (helpers/cluster-node.js with `opts`: `{ host, port, upstreamPort, cluster,
 * protection }`) and waits until it is started and `metrics().cluster.connected`.
 * `{ child, call(cmd, ...args) → Promise<result>, stop() }`; a failed start rejects with its error.
 */
async function forkClusterNode(opts, { netns, connectedWithinMs = 5000 } = {}) {
  const script = path.join(__dirname, 'cluster-node.js');
  const forkOpts = { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] };
  if (netns) Object.assign(forkOpts, { execPath: 'ip', execArgv: ['netns', 'exec', netns, process.execPath] });
  const child = fork(script, [JSON.stringify(opts)], forkOpts);
  const waiting = new Map();
  let n = 0;
  const started = new Promise((resolve, reject) => {
    child.on('message', (m) => {
      if (m.ready) return resolve();
      if (m.fatal) return reject(new Error(m.fatal));
      const w = waiting.get(m.id);
      waiting.delete(m.id);
      if (m.error) w.reject(new Error(m.error));
      else w.resolve(m.result);
    });
  });
  const call = (cmd, ...args) =>
    new Promise((resolve, reject) => {
      const id = ++n;
      waiting.set(id, { resolve, reject });
      child.send({ id, cmd, args });
    });
  const stop = async () => {
    if (child.exitCode === null && child.connected) await Promise.race([call('stop'), new Promise((r) => setTimeout(r, 3000))]);
    child.kill('SIGKILL');
  };
  try {
    await started;
    await h.waitFor(async () => (await call('metrics')).cluster.connected, { timeoutMs: connectedWithinMs, what: `${opts.cluster.nodeId} connected` });
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
  return { child, call, stop };
}

module.exports = { startRedis, forkClusterNode };
