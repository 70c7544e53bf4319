'use strict';
// Helpers for the `rampart` server specs: config directories with cert files, the CLI as a child
// process with its JSON log lines collected, admin API requests (TCP or unix socket), and a
// client that loops TLS connections and counts how each one ended.
const fs = require('node:fs');
const os = require('node:os');
const net = require('node:net');
const tls = require('node:tls');
const path = require('node:path');
const http = require('node:http');
const crypto = require('node:crypto');
const readline = require('node:readline');
const { spawn } = require('node:child_process');
const { generateSelfSignedCert } = require('../..');
const { waitFor, echoServer, closeServer } = require('./index');

const BIN = path.join(__dirname, '..', '..', 'bin', 'rampart.js');
/** What prometheus() adds while XDP is attached (checked against a live filter in server.xdp.test.js). */
const XDP_SERIES = [
  'rampart_xdp_packets_total',
  'rampart_xdp_banned_total',
  'rampart_xdp_ban_extended_total',
  'rampart_xdp_errors_total',
  'rampart_xdp_ban_queue_overflow_total',
];
const TOKEN = 'test-token-0123456789abcdef';

/** A fresh temp directory (removed by `cleanup()`). */
const dirs = [];
function tempDir(prefix = 'rampart-server-') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(d);
  return d;
}

/** Writes `cert.pem` / `key.pem` (or `names`) into `dir`; returns `{ certChain, privateKey, fingerprint256 }`. */
function writeCert(dir, { cert = 'cert.pem', key = 'key.pem', hosts = ['localhost'] } = {}) {
  const [certChain, privateKey] = generateSelfSignedCert(hosts);
  fs.writeFileSync(path.join(dir, cert), certChain);
  fs.writeFileSync(path.join(dir, key), privateKey);
  return { certChain, privateKey, fingerprint256: new crypto.X509Certificate(certChain).fingerprint256 };
}

/** Writes `obj` as JSON to `file` in place (open, truncate, write). */
function writeJson(file, obj) {
  fs.writeFileSync(file, `${JSON.stringify(obj, null, 2)}\n`);
}

/** Writes `obj` as JSON next to `file` and renames it over `file` (what editors and tools do). */
function writeJsonAtomic(file, obj) {
  const tmp = `${file}.tmp-${process.pid}-${Date.now()}`;
  fs.writeFileSync(tmp, `${JSON.stringify(obj, null, 2)}\n`);
  fs.renameSync(tmp, file);
}

/**
 * A minimal config file: one TLS listener on 127.0.0.1:`port` with cert files, one route to
 * `upstreamPort`, admin on `adminPort` (or `socketPath`), one worker thread.
 */
function baseConfig({ port, upstreamPort, adminPort, socketPath, token = TOKEN, protection, drainMs = 1000, cert = 'cert.pem', key = 'key.pem' }) {
  const listener = { host: '127.0.0.1', port, defaultCert: { certChainFile: cert, privateKeyFile: key } };
  if (protection) listener.protection = protection;
  const admin = socketPath ? { socketPath } : { port: adminPort };
  if (token) admin.token = token;
  return {
    proxy: {
      workerThreads: 1,
      listeners: [listener],
      routes: [{ sni: '', terminateTls: true, upstreams: [{ kind: 'tcp', host: '127.0.0.1', port: upstreamPort }] }],
    },
    admin,
    drainMs,
  };
}

const children = new Set();

/** Runs `rampart <args>` to completion: `{ code, stdout, stderr }`. */
function runCli(args, { cwd, timeoutMs = 15000 } = {}) {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [BIN, ...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('close', (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `rampart <args>` as a child process, stdout parsed as JSON lines into `events`. */
class ServerChild {
  /** `wrap`: a command to run it under, e.g. `['ip', 'netns', 'exec', ns]` (it must exec, keeping the pid). */
  constructor(args, { env, wrap = [] } = {}) {
    this.events = [];
    this.lines = [];
    this.stderr = '';
    const argv = [...wrap, process.execPath, BIN, ...args];
    this.proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: env || process.env });
    children.add(this);
    this.exited = new Promise((resolve) => {
      this.proc.on('exit', (code, signal) => {
        children.delete(this);
        this.exit = { code, signal };
        resolve(this.exit);
      });
    });
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      this.lines.push(line);
      try {
        this.events.push(JSON.parse(line));
      } catch {
        this.events.push({ unparsed: line });
      }
    });
    this.proc.stderr.on('data', (d) => (this.stderr += d));
  }

  /** Starts `rampart serve --config file` and waits for its `start` event. */
  static async serve(file, { args = [], timeoutMs = 10000 } = {}) {
    const c = new ServerChild(['serve', '--config', file, ...args]);
    await c.waitEvent((e) => e.event === 'start', { timeoutMs, what: 'start event' });
    return c;
  }

  /** The first event from index `from` matching `pred`; rejects after `timeoutMs` or on exit. */
  async waitEvent(pred, { from = 0, timeoutMs = 10000, what = 'event' } = {}) {
    return waitFor(
      () => {
        const e = this.events.slice(from).find(pred);
        if (e) return e;
        if (this.exit)
          throw new Error(`rampart exited (${JSON.stringify(this.exit)}) while waiting for ${what}; stderr: ${this.stderr}; stdout: ${this.lines.join('\n')}`);
        return null;
      },
      { timeoutMs, what: `${what} (log so far: ${this.lines.slice(-5).join(' | ')})` }
    );
  }

  /** The next `reload` event after the current position, after running `action`. */
  async reloadAfter(action, opts = {}) {
    const from = this.events.length;
    await action();
    return this.waitEvent((e) => e.event === 'reload', { from, what: 'reload event', ...opts });
  }

  signal(sig) {
    if (!this.exit) this.proc.kill(sig);
  }

  async close() {
    if (this.exit) return this.exit;
    this.proc.kill('SIGKILL');
    return this.exited;
  }
}

/** Kills every child still running and removes the temp directories. */
async function cleanup() {
  await Promise.all([...children].map((c) => c.close()));
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
}

/**
 * An admin API request. `target` is `{ port }` or `{ socketPath }`. Resolves `{ status, headers,
 * text, json }` (`json` undefined when the body is not JSON).
 */
function admin(target, method, urlPath, { body, token, headers = {}, rawBody } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (token) h.authorization = `Bearer ${token}`;
    let payload = rawBody;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      h['content-type'] = 'application/json';
    }
    if (payload !== undefined) h['content-length'] = Buffer.byteLength(payload);
    const req = http.request(
      {
        ...(target.socketPath ? { socketPath: target.socketPath } : { host: '127.0.0.1', port: target.port }),
        method,
        path: urlPath,
        headers: h,
        agent: false,
      },
      (res) => {
        const chunks = [];
        res.on('data', (d) => chunks.push(d));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode, headers: res.headers, text, json });
        });
      }
    );
    req.on('error', reject);
    req.setTimeout(10000, () => req.destroy(new Error('admin request timed out')));
    if (payload !== undefined) req.end(payload);
    else req.end();
  });
}

/**
 * One TLS connection: resolves `{ ok: true, fingerprint256, data }` after an echo round trip
 * (`data`: all bytes received, an upstream's tag first), or `{ ok: false, code }`.
 */
function tlsAttempt(port, { timeoutMs = 3000, localAddress } = {}) {
  return new Promise((resolve) => {
    const s = tls.connect({ port, host: '127.0.0.1', localAddress, servername: 'localhost', rejectUnauthorized: false });
    let data = '';
    let done = false;
    const finish = (r) => {
      if (done) return;
      done = true;
      clearTimeout(t);
      s.destroy();
      resolve(r);
    };
    const t = setTimeout(() => finish({ ok: false, code: 'TIMEOUT' }), timeoutMs);
    s.on('secureConnect', () => s.write('ping'));
    s.on('data', (d) => {
      data += d.toString('latin1');
      if (data.includes('ping')) finish({ ok: true, fingerprint256: s.getPeerCertificate().fingerprint256, data });
    });
    s.on('error', (e) => finish({ ok: false, code: e.code || e.message }));
    s.on('close', () => finish({ ok: false, code: 'CLOSED' }));
  });
}

/**
 * Opens TLS connections to `port` one after another until `stop()`; `stop()` resolves the tally
 * `{ total, ok, failed: { code: n } }`. Bounded by `maxMs`.
 */
function loopClient(port, { maxMs = 30000 } = {}) {
  const tally = { total: 0, ok: 0, failed: {} };
  let running = true;
  const end = Date.now() + maxMs;
  const done = (async () => {
    while (running && Date.now() < end) {
      const r = await tlsAttempt(port);
      tally.total++;
      if (r.ok) tally.ok++;
      else tally.failed[r.code] = (tally.failed[r.code] || 0) + 1;
    }
    return tally;
  })();
  return {
    tally,
    stop() {
      running = false;
      return done;
    },
  };
}

/** True when something accepts TCP connections on 127.0.0.1:`port`. */
function accepting(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.on('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

/**
 * Registers `test.before` / `test.after` for a spec file: echo servers started before (one per
 * entry of `tags`, `''` for a plain echo) and, after, every server child killed, temp folders
 * removed and the echo servers closed. Returns the started servers by tag, filled in before the
 * first test runs.
 */
function echoSuite(test, tags = ['']) {
  const servers = {};
  test.before(async () => {
    for (const tag of tags) servers[tag] = await echoServer(tag ? { tag } : undefined);
  });
  test.after(async () => {
    await cleanup();
    for (const tag of tags) await closeServer(servers[tag]);
  });
  return servers;
}

/**
 * A TLS connection to `port` (SNI localhost) kept open. `echo(text)` writes `text` and resolves
 * what came back once it includes `text` (3 s); `closed` resolves the close time (ms epoch).
 */
async function openConnection(port) {
  const sock = tls.connect({ port, host: '127.0.0.1', servername: 'localhost', rejectUnauthorized: false });
  await new Promise((resolve, reject) => {
    sock.once('secureConnect', resolve);
    sock.once('error', reject);
  });
  let buf = '';
  sock.on('data', (d) => (buf += d));
  sock.on('error', () => {});
  const closed = new Promise((r) => sock.on('close', () => r(Date.now())));
  return {
    sock,
    closed,
    async echo(text) {
      buf = '';
      sock.write(text);
      await waitFor(() => buf.includes(text), { timeoutMs: 3000, what: `echo of ${text}` });
      return buf;
    },
  };
}

/**
 * A config folder for `rampart serve`: the test certificate and `rampart.json` (`baseConfig` on
 * free proxy and admin ports in front of `upstreamPort`, then `edit(doc, dir)`). Returns
 * `{ dir, file, doc, port, adminPort, api }`.
 */
async function configDir(upstreamPort, edit = () => {}) {
  const h = require('./index');
  const dir = tempDir();
  writeCert(dir);
  const [port, adminPort] = await h.freePorts(2);
  const doc = baseConfig({ port, upstreamPort, adminPort });
  edit(doc, dir);
  const file = path.join(dir, 'rampart.json');
  writeJson(file, doc);
  return { dir, file, doc, port, adminPort, api: { port: adminPort } };
}

module.exports = {
  BIN,
  TOKEN,
  XDP_SERIES,
  runCli,
  tempDir,
  writeCert,
  writeJson,
  writeJsonAtomic,
  baseConfig,
  configDir,
  ServerChild,
  cleanup,
  echoSuite,
  openConnection,
  admin,
  tlsAttempt,
  loopClient,
  accepting,
};
