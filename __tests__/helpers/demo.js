'use strict';
// `npm start` (bin/demo.js) as a child for the demo specs: started in its own process group on a
// free port, its stdout and stderr collected, stopped with SIGTERM.
const path = require('node:path');
const { spawn } = require('node:child_process');
const h = require('.');

/**
 * Starts the demo with `env` added (RAMPART_DEMO_PORT is set to a free port) and waits until it
 * printed its instructions. Returns `{ port, out(), stop() }`: `out()` is everything printed so
 * far, `stop()` sends SIGTERM to the group and resolves when the child has closed.
 */
async function startDemo(env = {}) {
  const port = await h.freePort();
  const child = spawn('npm', ['start', '--silent'], {
    cwd: path.join(__dirname, '..', '..'),
    env: { ...process.env, RAMPART_DEMO_PORT: String(port), RAMPART_DEMO_ADMIN_PORT: '0', ...env },
    detached: true,
  });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const closed = new Promise((r) => child.once('close', r));
  const stop = async () => {
    try {
      process.kill(-child.pid, 'SIGTERM');
    } catch (e) {
      if (e.code !== 'ESRCH') throw e;
    }
    await closed;
  };
  try {
    await h.waitFor(() => out.includes('Ctrl-C stops'), { timeoutMs: 20000, what: 'the demo to print its instructions' });
  } catch (e) {
    await stop();
    throw new Error(`${e.message}; the demo printed:\n${out}`);
  }
  return { port, out: () => out, stop };
}

module.exports = { startDemo };
