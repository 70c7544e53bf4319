'use strict';
/**
 * The admin API (docs/admin-api.md) on node:http: HTTP/1.1, JSON in and out.
 *
 * | route | |
 * |---|---|
 * | `GET /` or `GET /ui` | the incident page (ui.html, see ui.js) |
 * | `GET /ui.json` | the page's state, polled by it every second (ui.js `uiState`) |
 * | `GET /health` | `{ ok, pid, version, ports, reloadedAt }` (never needs the token; 503 when not serving) |
 * | `GET /metrics` | Prometheus text 0.0.4 |
 * | `GET /metrics.json` | `metrics()` plus `server: { reloads, lastReloadSuccessful, reloadedAt }` |
 * | `GET /blocked?port=&detail=1` | `blockedIps({ port, detail })` |
 * | `GET /explain?ip=` | `explain(ip)` |
 * | `POST /block` `{ cidr, ttlMs?, reason?, port? }` | `blockIp` → 204 |
 * | `DELETE /block` `{ cidr, port? }` | `unblockIp` → `{ removed }` |
 * | `GET /xdp` | `xdpStatus()` plus `configured` and `lastError` |
 * | `POST /reload` | reloads the file → `{ reloaded: true, applied, changed }`, or 400 `{ error, errors }` |
 *
 * Access: with a token (`admin.token` / `admin.tokenFile`) every route but `/health` needs
 * `Authorization: Bearer <token>` (401 otherwise, checked before the route is looked up, so
 * nothing about the API leaks); the comparison hashes both sides to 32 bytes and uses
 * `crypto.timingSafeEqual`. GET and HEAD also take HTTP Basic with the token as the password
 * (any user name), which a browser asks for and then sends with the page's own requests: the 401
 * of the page's paths challenges with `Basic`, the others with `Bearer`. Changes (POST, DELETE)
 * take only Bearer, which a browser never adds by itself, so a cross-site form cannot make them. Without a token the API is read-only: POST and DELETE answer 403.
 * Input: bodies up to 1 MiB (413 beyond), parsed as JSON whatever the content-type (400 when it
 * is not JSON), every field and query parameter checked (unknown ones are errors); 404 for an
 * unknown path, 405 (with `Allow`) for a known path with another method. Errors are
 * `{ error, errors? }`, `errors` being `{ path, message }[]` as in ConfigError.
 *
 * DNS rebinding: over TCP, a request whose `Host` is not this API's (loopback IPs, `localhost`,
 * the listen IP, any IP when listening on 0.0.0.0 / ::, or a name in `admin.allowedHosts`; any
 * port) answers 421 Misdirected Request before anything else, `/health` included: a browser
 * tricked into sending a request here carries the attacker's name. The unix socket skips it.
 *
 * Slots: a client address holds at most `admin.maxConnectionsPerAddress` connections (default 8)
 * and all addresses together MAX_CONNECTIONS. A connection is idle until its request head is
 * complete and again between keep-alive requests; one idle without a complete head for
 * HEAD_TIMEOUT_MS is closed. When a new connection would pass a cap, the longest-idle connection
 * under that cap is closed to make room; when none is idle, the new one is closed at once. So
 * sockets that send nothing hold no slot for long and never lock out a client that sends a request.
 */
const fs = require('node:fs');
const net = require('node:net');
const http = require('node:http');
const crypto = require('node:crypto');
const ui = require('./ui');

const MAX_BODY_BYTES = 1 << 20;
const SOCKET_MODE = 0o660;
/** A connection that has not sent a complete request head within this is closed (ms). */
const HEAD_TIMEOUT_MS = 5000;
/** Connections of every address together, per listening address. */
const MAX_CONNECTIONS = 256;
const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 8;
/** Since when a socket is idle (ms epoch), 0 while a request is in progress. */
const IDLE_SINCE = Symbol('idleSince');
const HEAD_TIMER = Symbol('headTimer');
/** Requests of a socket whose response has not closed yet (pipelining may overlap them). */
const IN_FLIGHT = Symbol('inFlight');

class HttpError extends Error {
  constructor(status, message, errors, headers) {
    super(message);
    this.status = status;
    this.errors = errors;
    this.headers = headers;
  }
}

function send(res, status, body, headers = {}) {
  if (res.headersSent) return;
  const h = { 'cache-control': 'no-store', ...headers };
  if (body === undefined) {
    res.writeHead(status, h);
    res.end();
    return;
  }
  const text = typeof body === 'string' ? body : `${JSON.stringify(body)}\n`;
  if (!h['content-type']) h['content-type'] = 'application/json; charset=utf-8';
  h['content-length'] = Buffer.byteLength(text);
  res.writeHead(status, h);
  res.end(text);
}

const digest = (s) => crypto.createHash('sha256').update(s).digest();

/** The incident page's paths: their 401 challenges with Basic, so that a browser asks for the token. */
const PAGE_PATHS = new Set(['/', '/ui', '/ui.json']);

/**
 * Constant-time check of `Authorization: Bearer <token>`, or with `basic` (GET and HEAD) also
 * `Authorization: Basic base64(<any user>:<token>)`.
 */
function authorized(req, token, basic) {
  const header = req.headers.authorization || '';
  let given = null;
  const bearer = /^Bearer[ ]+(\S+)[ ]*$/i.exec(header);
  if (bearer) given = bearer[1];
  const b = basic && !bearer ? /^Basic[ ]+([A-Za-z0-9+/]+={0,2})[ ]*$/i.exec(header) : null;
  if (b) {
    const pair = Buffer.from(b[1], 'base64').toString('utf8');
    const colon = pair.indexOf(':');
    if (colon >= 0) given = pair.slice(colon + 1);
  }
  return crypto.timingSafeEqual(digest(given === null ? '' : given), digest(token)) && given !== null;
}

/** The request body parsed as JSON (undefined when empty); 413 past the cap, 400 when not JSON. */
function readJson(req) {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) {
      reject(new HttpError(413, `request body over ${MAX_BODY_BYTES} bytes`, undefined, { connection: 'close' }));
      req.resume();
      return;
    }
    const chunks = [];
    let size = 0;
    let over = false;
    req.on('data', (d) => {
      if (over) return;
      size += d.length;
      if (size > MAX_BODY_BYTES) {
        over = true;
        reject(new HttpError(413, `request body over ${MAX_BODY_BYTES} bytes`, undefined, { connection: 'close' }));
        return;
      }
      chunks.push(d);
    });
    req.on('error', reject);
    req.on('end', () => {
      if (over) return;
      const text = Buffer.concat(chunks).toString('utf8');
      if (text.trim() === '') return resolve(undefined);
      try {
        resolve(JSON.parse(text));
      } catch (e) {
        reject(new HttpError(400, `body is not JSON: ${e.message}`, [{ path: '', message: 'must be JSON' }]));
      }
    });
  });
}

function isPlainObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** A JSON object body with only `allowed` keys; `required` ones present. */
function bodyObject(body, allowed, required) {
  if (!isPlainObject(body)) {
    const msg = `must be a JSON object with ${allowed.join(', ')}`;
    throw new HttpError(400, `invalid body: ${msg}`, [{ path: '', message: msg }]);
  }
  const errors = [];
  for (const k of Object.keys(body)) {
    if (!allowed.includes(k)) errors.push({ path: k, message: `unknown field; expected one of: ${allowed.join(', ')}` });
  }
  for (const k of required) {
    if (body[k] === undefined || body[k] === null) errors.push({ path: k, message: 'required' });
  }
  if (errors.length) throw new HttpError(400, `invalid body: ${errors.map((e) => `${e.path}: ${e.message}`).join('; ')}`, errors);
  return body;
}

/** Query parameters, only `allowed` ones. */
function query(url, allowed) {
  const errors = [];
  const out = {};
  for (const [k, v] of url.searchParams) {
    if (!allowed.includes(k))
      errors.push({
        path: `query.${k}`,
        message: allowed.length ? `unknown parameter; expected one of: ${allowed.join(', ')}` : 'this route takes no parameters',
      });
    else out[k] = v;
  }
  if (errors.length) throw new HttpError(400, `invalid query: ${errors.map((e) => `${e.path}: ${e.message}`).join('; ')}`, errors);
  return out;
}

/** A ConfigError from the proxy as a 400, paths relative to the request (`opts.port` → `port`). */
function configError(e, prefix = '') {
  if (!e || !Array.isArray(e.errors)) return e;
  const errors = e.errors.map((x) => ({ path: prefix + x.path.replace(/^opts\./, ''), message: x.message }));
  const n = errors.length;
  return new HttpError(400, `invalid input (${n} problem${n === 1 ? '' : 's'}): ${errors.map((x) => `${x.path}: ${x.message}`).join('; ')}`, errors);
}

function call(fn, prefix) {
  try {
    return fn();
  } catch (e) {
    throw configError(e, prefix);
  }
}

function optsFrom(body, keys) {
  const opts = {};
  for (const k of keys) if (body[k] !== undefined) opts[k] = body[k];
  return opts;
}

const WILDCARD = new Set(['0.0.0.0', '::']);

/**
 * Whether the `Host` of `req` names this admin API (see the module note). `admin`: the section
 * in force (`host`: the listen IP, `allowedHosts`: lowercase names).
 */
function hostAllowed(req, admin) {
  if (!req.socket.remoteAddress) return true; // unix socket: no browser reaches it
  const raw = req.headers.host;
  if (raw === undefined) return true; // HTTP/1.0 without Host (node refuses HTTP/1.1 without one): not a browser
  if (!/^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/.test(raw)) return false;
  let name;
  try {
    name = new URL(`http://${raw}`).hostname.toLowerCase();
  } catch {
    return false;
  }
  if (name.endsWith('.')) name = name.slice(0, -1);
  if (name.startsWith('[')) name = name.slice(1, -1);
  if (name === 'localhost') return true;
  const family = net.isIP(name);
  if (family === 4 && name.startsWith('127.')) return true;
  if (family === 6 && (name === '::1' || /^::ffff:(127\.|7f[0-9a-f]{2}:)/.test(name))) return true;
  if (family !== 0 && admin) {
    if (WILDCARD.has(admin.host)) return true;
    if (admin.host && net.isIP(admin.host) === family && canonicalIp(admin.host) === name) return true;
  }
  return Boolean(admin && Array.isArray(admin.allowedHosts) && admin.allowedHosts.includes(name));
}

/** An IP as the URL parser writes it (lowercase, IPv6 compressed), to compare with a Host. */
function canonicalIp(ip) {
  try {
    const h = new URL(`http://${net.isIP(ip) === 6 ? `[${ip}]` : ip}`).hostname;
    return h.startsWith('[') ? h.slice(1, -1) : h;
  } catch {
    return ip;
  }
}

/** The request handler, over a Supervisor. `listen`: the admin section the API listens with. */
function createHandler({ supervisor, log, version, listen = null, history = new ui.History(() => supervisor.metrics()) }) {
  const page = (url) => {
    query(url, []);
    return [200, ui.html, ui.PAGE_HEADERS];
  };
  const routes = {
    '/': { GET: page },
    '/ui': { GET: page },
    '/ui.json': {
      GET: (url) => {
        query(url, []);
        return [200, ui.uiState({ supervisor, history, version })];
      },
    },
    '/health': {
      GET: (url) => {
        query(url, []);
        const ok = supervisor.running;
        return [
          ok ? 200 : 503,
          { ok, pid: process.pid, version, ports: supervisor.ports(), reloadedAt: supervisor.reloadedAt && supervisor.reloadedAt.toISOString() },
        ];
      },
    },
    '/metrics': {
      GET: (url) => {
        query(url, []);
        return [200, supervisor.prometheus(), { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }];
      },
    },
    '/metrics.json': {
      GET: (url) => {
        query(url, []);
        return [200, supervisor.metrics()];
      },
    },
    '/blocked': {
      GET: (url) => {
        const q = query(url, ['port', 'detail']);
        const errors = [];
        const opts = {};
        if (q.port !== undefined && q.port !== '') {
          if (!/^\d{1,5}$/.test(q.port) || Number(q.port) < 1 || Number(q.port) > 65535)
            errors.push({ path: 'query.port', message: `must be a port number in [1, 65535], got ${JSON.stringify(q.port)}` });
          else opts.port = Number(q.port);
        }
        if (q.detail !== undefined) {
          if (['1', 'true'].includes(q.detail)) opts.detail = true;
          else if (!['', '0', 'false'].includes(q.detail))
            errors.push({ path: 'query.detail', message: `must be 1, true, 0 or false, got ${JSON.stringify(q.detail)}` });
        }
        if (errors.length) throw new HttpError(400, `invalid query: ${errors.map((e) => `${e.path}: ${e.message}`).join('; ')}`, errors);
        return [200, call(() => supervisor.blockedIps(opts), 'query.')];
      },
    },
    '/explain': {
      GET: (url) => {
        const q = query(url, ['ip']);
        if (q.ip === undefined || q.ip === '') throw new HttpError(400, 'invalid query: query.ip: is required', [{ path: 'query.ip', message: 'is required' }]);
        return [200, call(() => supervisor.explain(q.ip), 'query.')];
      },
    },
    '/block': {
      POST: async (url, body, req) => {
        query(url, []);
        bodyObject(body, ['cidr', 'ttlMs', 'reason', 'port'], ['cidr']);
        const opts = optsFrom(body, ['ttlMs', 'reason', 'port']);
        try {
          await supervisor.block(body.cidr, opts);
        } catch (e) {
          throw configError(e);
        }
        log.event('block', { cidr: body.cidr, ...opts, via: 'admin', remote: remoteOf(req) });
        return [204, undefined];
      },
      DELETE: async (url, body, req) => {
        query(url, []);
        bodyObject(body, ['cidr', 'port'], ['cidr']);
        const opts = optsFrom(body, ['port']);
        let removed;
        try {
          removed = await supervisor.unblock(body.cidr, opts);
        } catch (e) {
          throw configError(e);
        }
        log.event('unblock', { cidr: body.cidr, ...opts, removed, via: 'admin', remote: remoteOf(req) });
        return [200, { removed }];
      },
    },
    '/xdp': {
      GET: (url) => {
        query(url, []);
        return [200, supervisor.xdpStatus()];
      },
    },
    '/reload': {
      POST: async (url, body) => {
        query(url, []);
        if (body !== undefined) bodyObject(body, [], []);
        const r = await supervisor.reload('admin');
        if (r.ok) return [200, { reloaded: true, applied: r.applied, changed: r.changed }];
        if (r.errors) return [400, { error: r.message, errors: r.errors }];
        return [500, { error: r.message, code: r.code }];
      },
    },
  };
  const known = Object.keys(routes).join(', ');

  async function handle(req, res) {
    try {
      const admin = { ...(listen || {}), ...(supervisor.adminConfig ? supervisor.adminConfig() || {} : {}) };
      if (listen) admin.host = listen.host;
      if (!hostAllowed(req, admin)) {
        throw new HttpError(
          421,
          `misdirected request: Host ${JSON.stringify(req.headers.host)} does not name this admin API; use its address, localhost, or a name listed in admin.allowedHosts`
        );
      }
      let url;
      try {
        url = new URL(req.url, 'http://admin.invalid');
      } catch {
        throw new HttpError(400, 'invalid request target');
      }
      const token = supervisor.token();
      const readOnly = req.method === 'GET' || req.method === 'HEAD';
      if (url.pathname !== '/health' && token && !authorized(req, token, readOnly)) {
        const challenge = readOnly && PAGE_PATHS.has(url.pathname) ? 'Basic realm="rampart", charset="UTF-8"' : 'Bearer realm="rampart"';
        throw new HttpError(
          401,
          `unauthorized: send Authorization: Bearer <admin token>${readOnly ? ' (or, for GET, Basic with the token as the password)' : ''}`,
          undefined,
          { 'www-authenticate': challenge }
        );
      }
      const route = routes[url.pathname];
      if (!route) throw new HttpError(404, `no route ${url.pathname}; routes: ${known}`);
      const method = req.method === 'HEAD' ? 'GET' : req.method;
      const fn = route[method];
      if (!fn) {
        const allow = Object.keys(route);
        if (allow.includes('GET')) allow.push('HEAD');
        throw new HttpError(405, `${req.method} is not allowed on ${url.pathname}; allowed: ${allow.join(', ')}`, undefined, { allow: allow.join(', ') });
      }
      const mutates = method === 'POST' || method === 'DELETE';
      if (mutates && !token) {
        throw new HttpError(403, 'changes over the admin API are disabled: set admin.token or admin.tokenFile in the config file');
      }
      const body = mutates ? await readJson(req) : undefined;
      const [status, out, headers] = await fn(url, body, req);
      send(res, status, out, headers);
    } catch (e) {
      if (e instanceof HttpError) {
        const body = { error: e.message };
        if (e.errors) body.errors = e.errors;
        send(res, e.status, body, e.headers);
        if (e.status === 413) res.on('finish', () => req.socket.destroySoon());
      } else {
        log.event('error', { code: 'admin_failed', message: e && e.message ? e.message : String(e), path: req.url, method: req.method });
        send(res, 500, { error: e && e.message ? e.message : String(e) });
      }
    }
  }
  // node:http ignores what a handler returns: a rejection (a failing send) is logged here.
  return (req, res) =>
    handle(req, res).catch((e) => {
      log.event('error', { code: 'admin_failed', message: e && e.message ? e.message : String(e), path: req.url, method: req.method });
      res.destroy();
    });
}

/**
 * Caps the connections of `server` per client address and in all, and closes those without a
 * complete request head after HEAD_TIMEOUT_MS (see the module note). `perAddress()` is read at
 * each connection (the cap in force after a reload).
 */
function guardConnections(server, perAddress) {
  const all = new Set();
  const byAddress = new Map();
  const forget = (socket) => {
    clearTimeout(socket[HEAD_TIMER]);
    if (!all.delete(socket)) return;
    const addr = socket.remoteAddress;
    const mine = byAddress.get(addr);
    if (mine) {
      mine.delete(socket);
      if (mine.size === 0) byAddress.delete(addr);
    }
  };
  /** Closes the longest-idle socket of `set`; false when every one has a request in progress. */
  const evict = (set) => {
    let oldest = null;
    for (const s of set) if (s[IDLE_SINCE] > 0 && (oldest === null || s[IDLE_SINCE] < oldest[IDLE_SINCE])) oldest = s;
    if (oldest === null) return false;
    forget(oldest);
    oldest.destroy();
    return true;
  };
  const idle = (socket) => {
    socket[IDLE_SINCE] = Date.now();
    clearTimeout(socket[HEAD_TIMER]);
    socket[HEAD_TIMER] = setTimeout(() => socket.destroy(), HEAD_TIMEOUT_MS).unref();
  };
  server.on('connection', (socket) => {
    const addr = socket.remoteAddress; // undefined on the unix socket: only the total applies
    const mine = addr === undefined ? null : byAddress.get(addr) || null;
    if ((mine && mine.size >= perAddress() && !evict(mine)) || (all.size >= MAX_CONNECTIONS && !evict(all))) {
      socket.destroy();
      return;
    }
    all.add(socket);
    if (addr !== undefined) {
      if (mine) mine.add(socket);
      else byAddress.set(addr, new Set([socket]));
    }
    socket[IN_FLIGHT] = 0;
    idle(socket);
    socket.once('close', () => forget(socket));
  });
  server.on('request', (req, res) => {
    const socket = req.socket;
    socket[IN_FLIGHT]++;
    socket[IDLE_SINCE] = 0;
    clearTimeout(socket[HEAD_TIMER]);
    res.once('close', () => {
      // keep-alive: idle again until the next request's head (keepAliveTimeout closes it)
      if (--socket[IN_FLIGHT] === 0 && !socket.destroyed && all.has(socket)) idle(socket);
    });
  });
}

function remoteOf(req) {
  const s = req.socket;
  return s.remoteAddress ? `${s.remoteAddress}:${s.remotePort}` : 'unix';
}

/**
 * Before listening on a unix socket path: a stale socket file (nothing accepts on it: connect
 * fails with ECONNREFUSED) is removed; a live one, a non-socket file, or any other answer is an
 * error and nothing is removed.
 */
async function clearStaleSocket(p) {
  let st;
  try {
    st = fs.lstatSync(p);
  } catch (e) {
    if (e.code === 'ENOENT') return;
    throw e;
  }
  if (!st.isSocket()) throw new Error(`${p} exists and is not a socket; not removing it`);
  const answer = await new Promise((resolve) => {
    const c = net.connect(p);
    c.once('connect', () => {
      c.destroy();
      resolve('live');
    });
    c.once('error', (e) => resolve(e.code || 'error'));
  });
  if (answer === 'live') throw Object.assign(new Error(`${p}: another process is serving on this socket`), { code: 'EADDRINUSE' });
  if (answer === 'ENOENT') return; // gone meanwhile
  if (answer !== 'ECONNREFUSED') throw new Error(`${p}: cannot tell whether the socket is in use (${answer}); not removing it`);
  fs.unlinkSync(p);
}

/** Listens on one address (`{ socketPath }` or `{ host, port }`) with `handler`. */
async function listenOne(where, handler, log, perAddress) {
  const server = http.createServer(
    { requestTimeout: 30000, headersTimeout: HEAD_TIMEOUT_MS, keepAliveTimeout: 5000, maxHeaderSize: 16384, connectionsCheckingInterval: 1000 },
    handler
  );
  guardConnections(server, perAddress);
  if (where.socketPath) await clearStaleSocket(where.socketPath);
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    if (where.socketPath) {
      const mask = process.umask(0o117); // the socket is created 0660, never briefly wider
      try {
        server.listen(where.socketPath, resolve);
      } finally {
        process.umask(mask);
      }
    } else {
      server.listen(where.port, where.host, resolve);
    }
  });
  server.on('error', (e) => log.event('error', { code: 'admin_failed', message: e.message }));
  if (where.socketPath) {
    fs.chmodSync(where.socketPath, SOCKET_MODE);
    return { server, address: `unix:${where.socketPath}` };
  }
  const a = server.address();
  return { server, address: `http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}` };
}

function closeServer(server) {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/**
 * Listens on `admin.host`:`admin.port` and/or `admin.socketPath` (mode 0660). Resolves
 * `{ addresses, close() }`, each address `http://host:port` or `unix:/path`. If one address
 * cannot be bound, none is kept.
 */
async function startAdmin({ admin, supervisor, log, version }) {
  const history = new ui.History(() => supervisor.metrics()).start();
  const handler = createHandler({ supervisor, log, version, listen: admin, history });
  const perAddress = () => {
    const a = supervisor.adminConfig ? supervisor.adminConfig() : null;
    return (a && a.maxConnectionsPerAddress) || admin.maxConnectionsPerAddress || DEFAULT_MAX_CONNECTIONS_PER_ADDRESS;
  };
  const wanted = [];
  if (admin.port !== null && admin.port !== undefined) wanted.push({ host: admin.host, port: admin.port });
  if (admin.socketPath) wanted.push({ socketPath: admin.socketPath });
  const up = [];
  try {
    for (const w of wanted) up.push(await listenOne(w, handler, log, perAddress));
  } catch (e) {
    history.stop();
    await Promise.all(up.map((u) => closeServer(u.server)));
    throw e;
  }
  return {
    addresses: up.map((u) => u.address),
    close: () => {
      history.stop();
      return Promise.all(up.map((u) => closeServer(u.server)));
    },
  };
}

module.exports = { startAdmin, createHandler, clearStaleSocket, hostAllowed, MAX_BODY_BYTES, HEAD_TIMEOUT_MS, MAX_CONNECTIONS };
