'use strict';
// Starts `xdp-proxy.js` inside network namespace `ns` and talks to it: one JSON command per line
// on stdin, one JSON answer per line on stdout. Used by the XDP spec and benches/xdp-flood.js.
const path = require('node:path');
const readline = require('node:readline');
const { spawn } = require('node:child_process');

/**
 * `{ child, call(cmd, args) → Promise<result>, ready: Promise<{ ready } | { fatal }> }`.
 */
function startXdpProxy(ns, opts) {
  const script = path.join(__dirname, 'xdp-proxy.js');
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, script, JSON.stringify(opts)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const waiting = new Map();
  let ready;
  const readyP = new Promise((r) => (ready = r));
  readline.createInterface({ input: child.stdout }).on('line', (line) => {
    const msg = JSON.parse(line);
    if (msg.ready || msg.fatal) return ready(msg);
    const w = waiting.get(msg.id);
    waiting.delete(msg.id);
    if (msg.error) w.reject(new Error(msg.error));
    else w.resolve(msg.result);
  });
  let n = 0;
  const call = (cmd, args) =>
    new Promise((resolve, reject) => {
      const mid = ++n;
      waiting.set(mid, { resolve, reject });
      child.stdin.write(`${JSON.stringify({ id: mid, cmd, args })}\n`);
    });
  return { child, call, ready: readyP };
}

module.exports = { startXdpProxy };
