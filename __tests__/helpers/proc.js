'use strict';
// Process and port plumbing shared by the specs (helpers/index.js) and the benches (benches/lib.js).
// It loads nothing of Rampart, so a bench can pick its addon (RAMPART_PATH) after requiring it.
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { spawn } = require('node:child_process');

/**
 * Runs a command to completion (in `cwd` when given, `input` written to its stdin), killed with
 * SIGKILL after `timeoutMs`. Resolves `{ code, stdout, stderr }` (Buffers; code -1 when it could not
 * start); never rejects.
 */
function run(cmd, args, { input, timeoutMs = 15000, env, cwd } = {}) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env: env || process.env, cwd });
    const out = [];
    const err = [];
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.stdout.on('data', (d) => out.push(d));
    p.stderr.on('data', (d) => err.push(d));
    p.on('error', (e) => {
      clearTimeout(t);
      resolve({ code: -1, stdout: Buffer.alloc(0), stderr: Buffer.from(String(e)) });
    });
    p.on('close', (code) => {
      clearTimeout(t);
      resolve({ code, stdout: Buffer.concat(out), stderr: Buffer.concat(err) });
    });
    p.stdin.on('error', () => {});
    if (input !== undefined) p.stdin.end(input);
    else p.stdin.end();
  });
}

/** True when `name` is an executable on PATH. */
function haveTool(name) {
  return (process.env.PATH || '').split(':').some((d) => {
    try {
      fs.accessSync(path.join(d, name), fs.constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** A TCP port free on 127.0.0.1 right now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

module.exports = { run, haveTool, freePort };
