'use strict';
/**
 * The `rampart` config file (docs/operating.md: Config file): JSON `{ proxy: ProxyConfig, admin?, xdp?,
 * drainMs = 5000 }`.
 *
 * - Any object under `proxy` may give `certChainFile` / `privateKeyFile` / `ocspFile` instead of
 *   `certChain` / `privateKey` / `ocspResponse` (the OCSP file is DER, passed as a Buffer). Relative paths (and `admin.tokenFile`, `admin.socketPath`) are resolved against
 *   the directory of the config file *as given*, never its realpath, so a Kubernetes `..data`
 *   symlink swap or a certbot `live/` symlink is followed on the next load.
 * - Loading never throws. It returns `{ errors }` (every problem as `{ path, message }`, paths from
 *   the top of the file: `admin.port`, `proxy.listeners[0].defaultCert.certChainFile`, `''` for
 *   the file itself) or the resolved config; `proxy` is validated by constructing a RampartProxy
 *   (never started), so its errors are exactly the addon's, prefixed `proxy.`.
 * - `inputs` lists every file read with what was read (bytes, or the error code): the watcher
 *   compares a fresh read against it to tell whether anything changed since this load.
 * - Bounds: every file read (the config, cert and token files) is at most MAX_FILE_BYTES (a
 *   longer one is an `EFBIG` read error, read no further), and the document nests at most
 *   MAX_CONFIG_DEPTH levels of arrays and objects (the file's top object being level 1): a deeper
 *   value is one error naming its path, before anything walks it.
 */
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const crypto = require('node:crypto');
const { MAX_CONFIG_DEPTH } = require('..');

const TOP_KEYS = ['proxy', 'admin', 'xdp', 'drainMs'];
const ADMIN_KEYS = ['host', 'port', 'socketPath', 'token', 'tokenFile', 'allowedHosts', 'maxConnectionsPerAddress'];
const XDP_KEYS = ['interface', 'mode'];
const XDP_MODES = ['auto', 'native', 'generic'];
/** [field, file field, binary]: a binary file is passed as a Buffer, the others as text. */
const CERT_FILE_FIELDS = [
  ['certChain', 'certChainFile', false],
  ['privateKey', 'privateKeyFile', false],
  ['ocspResponse', 'ocspFile', true],
];
const DEFAULT_DRAIN_MS = 5000;
const MAX_DRAIN_MS = 3600000;
const MIN_TOKEN_LENGTH = 16;
const MAX_TOKEN_LENGTH = 4096;
/** Largest file read: the config file, and each cert or token file it names. */
const MAX_FILE_BYTES = 8 << 20;
const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 8;
const MAX_CONNECTIONS_PER_ADDRESS = 256;
const MAX_ALLOWED_HOSTS = 64;
/** sun_path is 108 bytes on Linux, one of them the terminating NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

const FS_ERRORS = {
  ENOENT: 'no such file or directory',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  EISDIR: 'is a directory',
  ENOTDIR: 'a path component is not a directory',
  ELOOP: 'too many symbolic links',
  EMFILE: 'too many open files',
  EFBIG: `larger than ${MAX_FILE_BYTES >> 20} MiB`,
};

/**
 * The bytes of file `p`, at most MAX_FILE_BYTES: a longer file (or a device that never ends)
 * throws `EFBIG` after reading one byte past the bound.
 */
function readBounded(p) {
  const fd = fs.openSync(p, 'r');
  try {
    const st = fs.fstatSync(fd);
    if (st.isDirectory()) throw Object.assign(new Error('is a directory'), { code: 'EISDIR' });
    if (st.isFile() && st.size > MAX_FILE_BYTES) throw Object.assign(new Error('file too large'), { code: 'EFBIG' });
    const chunks = [];
    let size = 0;
    const buf = Buffer.allocUnsafe(64 * 1024);
    for (;;) {
      const n = fs.readSync(fd, buf, 0, Math.min(buf.length, MAX_FILE_BYTES + 1 - size), null);
      if (n === 0) break;
      size += n;
      if (size > MAX_FILE_BYTES) throw Object.assign(new Error('file too large'), { code: 'EFBIG' });
      chunks.push(Buffer.from(buf.subarray(0, n)));
    }
    return Buffer.concat(chunks, size);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The path (from the document's top, as in errors) of the first array or object nested past
 * MAX_CONFIG_DEPTH levels, or null. Iterative, so any depth is walked safely.
 */
function tooDeep(doc) {
  const stack = [[doc, '', 1]];
  while (stack.length) {
    const [v, p, depth] = stack.pop();
    if (v === null || typeof v !== 'object') continue;
    if (depth > MAX_CONFIG_DEPTH) return p;
    const entries = Array.isArray(v) ? v.map((x, i) => [x, `${p}[${i}]`]) : Object.keys(v).map((k) => [v[k], p ? `${p}.${k}` : k]);
    for (let i = entries.length - 1; i >= 0; i--) stack.push([entries[i][0], entries[i][1], depth + 1]);
  }
  return null;
}

function describeFsError(e) {
  const code = e && e.code ? e.code : 'EIO';
  return `${code} (${FS_ERRORS[code] || (e && e.message) || 'read failed'})`;
}

function shown(v) {
  if (typeof v === 'string') return JSON.stringify(v);
  if (v === undefined) return 'nothing';
  if (typeof v === 'object') return v === null ? 'null' : Array.isArray(v) ? 'an array' : 'an object';
  return String(v);
}

function isPlainObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function unknownKeys(obj, allowed, prefix, errors) {
  for (const k of Object.keys(obj)) {
    if (!allowed.includes(k)) {
      errors.push({ path: prefix ? `${prefix}.${k}` : k, message: `unknown field; expected one of: ${allowed.join(', ')}` });
    }
  }
}

/** Line and column of a JSON.parse error position, when V8 names one. */
function jsonErrorMessage(e, text) {
  const m = /position (\d+)/.exec(e.message);
  if (!m) return `invalid JSON: ${e.message}`;
  const pos = Number(m[1]);
  const before = text.slice(0, pos);
  const line = before.split('\n').length;
  const column = pos - before.lastIndexOf('\n');
  return `invalid JSON: ${e.message} (line ${line}, column ${column})`;
}

/** SHA-256 over what was read: the same files with the same bytes give the same hash. */
function hashInputs(inputs) {
  const h = crypto.createHash('sha256');
  for (const i of inputs) {
    h.update(`${i.path}\0`);
    if (Buffer.isBuffer(i.data)) h.update(i.data);
    else h.update(`\0error:${i.error}`);
    h.update('\0');
  }
  return h.digest('hex');
}

/** Reads `paths` again, as `inputs` (for comparing with a load's `inputs`). */
function readInputs(paths) {
  return paths.map((p) => {
    try {
      return { path: p, data: readBounded(p) };
    } catch (e) {
      return { path: p, error: e.code || 'EIO' };
    }
  });
}

function validateAdmin(admin, dir, errors, read) {
  if (!isPlainObject(admin)) {
    errors.push({ path: 'admin', message: `must be an object, got ${shown(admin)}` });
    return null;
  }
  unknownKeys(admin, ADMIN_KEYS, 'admin', errors);
  const out = {
    host: '127.0.0.1',
    port: null,
    socketPath: null,
    token: null,
    tokenFile: null,
    tokenFileMode: null,
    allowedHosts: [],
    maxConnectionsPerAddress: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
  };
  const has = (k) => admin[k] !== undefined && admin[k] !== null;
  if (has('port')) {
    if (!Number.isInteger(admin.port) || admin.port < 0 || admin.port > 65535) {
      errors.push({ path: 'admin.port', message: `must be an integer in [0, 65535], got ${shown(admin.port)}` });
    } else out.port = admin.port;
  }
  if (has('socketPath')) {
    if (typeof admin.socketPath !== 'string' || admin.socketPath === '') {
      errors.push({ path: 'admin.socketPath', message: `must be a file path (string), got ${shown(admin.socketPath)}` });
    } else {
      const abs = path.resolve(dir, admin.socketPath);
      if (Buffer.byteLength(abs) > MAX_SOCKET_PATH_BYTES) {
        errors.push({ path: 'admin.socketPath', message: `${abs} is ${Buffer.byteLength(abs)} bytes; a unix socket path is at most ${MAX_SOCKET_PATH_BYTES}` });
      } else out.socketPath = abs;
    }
  }
  if (!has('port') && !has('socketPath')) {
    errors.push({ path: 'admin', message: 'give port (with host, default 127.0.0.1) and/or socketPath' });
  }
  if (has('host')) {
    if (typeof admin.host !== 'string' || net.isIP(admin.host) === 0) {
      errors.push({ path: 'admin.host', message: `must be an IP address such as "127.0.0.1" or "::1", got ${shown(admin.host)}` });
    } else if (!has('port')) {
      errors.push({ path: 'admin.host', message: 'only with port (socketPath listens on a unix socket)' });
    } else out.host = admin.host;
  }
  const checkToken = (value, p, from) => {
    const where = from ? ` (read from ${from})` : '';
    if (typeof value !== 'string') {
      errors.push({ path: p, message: `must be a string, got ${shown(value)}` });
      return null;
    }
    if (value.length < MIN_TOKEN_LENGTH || value.length > MAX_TOKEN_LENGTH) {
      errors.push({
        path: p,
        message: `must be ${MIN_TOKEN_LENGTH} to ${MAX_TOKEN_LENGTH} characters, got ${value.length}${where} (e.g. openssl rand -hex 32)`,
      });
      return null;
    }
    if (!/^[\x21-\x7e]+$/.test(value)) {
      errors.push({ path: p, message: `must be printable ASCII without spaces${where}` });
      return null;
    }
    return value;
  };
  if (has('token') && has('tokenFile')) {
    errors.push({ path: 'admin.tokenFile', message: 'give token or tokenFile, not both' });
  } else if (has('token')) {
    out.token = checkToken(admin.token, 'admin.token');
  } else if (has('tokenFile')) {
    if (typeof admin.tokenFile !== 'string' || admin.tokenFile === '') {
      errors.push({ path: 'admin.tokenFile', message: `must be a file path (string), got ${shown(admin.tokenFile)}` });
    } else {
      const abs = path.resolve(dir, admin.tokenFile);
      out.tokenFile = abs;
      const r = read(abs);
      if (r.error) errors.push({ path: 'admin.tokenFile', message: `cannot read ${abs}: ${r.error}` });
      else {
        out.token = checkToken(r.data.toString('utf8').replace(/\s+$/, ''), 'admin.tokenFile', abs);
        try {
          out.tokenFileMode = fs.statSync(abs).mode & 0o777;
        } catch {
          // replaced meanwhile: the watcher sees it and reloads
        }
      }
    }
  }
  if (has('allowedHosts')) {
    const list = admin.allowedHosts;
    if (!Array.isArray(list) || list.length > MAX_ALLOWED_HOSTS) {
      errors.push({ path: 'admin.allowedHosts', message: `must be an array of at most ${MAX_ALLOWED_HOSTS} host names, got ${shown(list)}` });
    } else {
      list.forEach((h, i) => {
        if (typeof h !== 'string' || !(HOST_NAME.test(h) || net.isIP(h) !== 0)) {
          errors.push({
            path: `admin.allowedHosts[${i}]`,
            message: `must be a host name such as "rampart.internal" or an IP address, without a port, got ${shown(h)}`,
          });
        } else out.allowedHosts.push(h.toLowerCase());
      });
    }
  }
  if (has('maxConnectionsPerAddress')) {
    const n = admin.maxConnectionsPerAddress;
    if (!Number.isInteger(n) || n < 1 || n > MAX_CONNECTIONS_PER_ADDRESS) {
      errors.push({ path: 'admin.maxConnectionsPerAddress', message: `must be an integer in [1, ${MAX_CONNECTIONS_PER_ADDRESS}], got ${shown(n)}` });
    } else out.maxConnectionsPerAddress = n;
  }
  return out;
}

/** A DNS name: dot-separated labels of letters, digits and hyphens (a trailing dot allowed). */
const HOST_NAME = /^(?=.{1,253}\.?$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i;

function validateXdp(xdp, errors) {
  if (!isPlainObject(xdp)) {
    errors.push({ path: 'xdp', message: `must be an object { interface, mode? }, got ${shown(xdp)}` });
    return null;
  }
  unknownKeys(xdp, XDP_KEYS, 'xdp', errors);
  const out = { interface: null, mode: 'auto' };
  if (typeof xdp.interface !== 'string' || xdp.interface === '' || xdp.interface.length > 15 || /[\s/]/.test(xdp.interface)) {
    errors.push({ path: 'xdp.interface', message: `must be a network interface name (1-15 characters, no spaces or '/'), got ${shown(xdp.interface)}` });
  } else out.interface = xdp.interface;
  if (xdp.mode !== undefined && xdp.mode !== null) {
    if (!XDP_MODES.includes(xdp.mode))
      errors.push({ path: 'xdp.mode', message: `must be one of ${XDP_MODES.map((m) => `'${m}'`).join(', ')}, got ${shown(xdp.mode)}` });
    else out.mode = xdp.mode;
  }
  return out;
}

/**
 * Replaces `certChainFile` / `privateKeyFile` by the files' text (`ocspFile` by its bytes), in place, everywhere under
 * `node`. Returns the cert objects that named a file: `[{ path, files: { certChainFile: abs }, failed }]`.
 */
function inlineCertFiles(node, p, dir, errors, read, found) {
  if (Array.isArray(node)) {
    for (const [i, v] of node.entries()) inlineCertFiles(v, `${p}[${i}]`, dir, errors, read, found);
    return found;
  }
  if (!isPlainObject(node)) return found;
  if (CERT_FILE_FIELDS.some(([, fileKey]) => fileKey in node)) {
    const entry = { path: p, files: {}, failed: false };
    for (const [field, fileKey, binary] of CERT_FILE_FIELDS) {
      if (!(fileKey in node)) continue;
      const value = node[fileKey];
      delete node[fileKey];
      if (node[field] !== undefined && node[field] !== null) {
        errors.push({ path: `${p}.${fileKey}`, message: `give ${field} or ${fileKey}, not both` });
        entry.failed = true;
        continue;
      }
      if (typeof value !== 'string' || value === '') {
        errors.push({ path: `${p}.${fileKey}`, message: `must be a file path (string), got ${shown(value)}` });
        entry.failed = true;
        continue;
      }
      const abs = path.resolve(dir, value);
      entry.files[fileKey] = abs;
      const r = read(abs);
      if (r.error) {
        errors.push({ path: `${p}.${fileKey}`, message: `cannot read ${abs}: ${r.error}` });
        entry.failed = true;
      } else {
        node[field] = binary ? r.data : r.data.toString('utf8');
      }
    }
    found.push(entry);
    return found;
  }
  for (const [k, v] of Object.entries(node)) inlineCertFiles(v, `${p}.${k}`, dir, errors, read, found);
  return found;
}

/**
 * Validates `proxy` the way the addon does; returns its errors with paths from the file's top.
 * Routes that fail to build (isolated: the others serve) are pushed to `failures` as
 * `{ path, message }` instead.
 */
function proxyErrors(proxy, certs, failures = []) {
  const { RampartProxy } = require('..');
  const fromFiles = (full) => {
    const cert = certs.find((c) => full === c.path || full.startsWith(`${c.path}.`));
    return cert
      ? ` (from ${Object.entries(cert.files)
          .map(([k, f]) => `${k} ${f}`)
          .join(', ')})`
      : '';
  };
  try {
    const p = new RampartProxy(proxy); // validation only, never started
    for (const f of p.metrics().routeFailures) {
      for (const err of f.errors) failures.push({ path: `proxy.${err.path}`, message: `${err.message}${fromFiles(`proxy.${err.path}`)}` });
    }
    return [];
  } catch (e) {
    if (!e || !Array.isArray(e.errors)) return [{ path: 'proxy', message: String(e && e.message ? e.message : e) }];
    const out = [];
    for (const err of e.errors) {
      const full = err.path ? `proxy.${err.path}` : 'proxy';
      const cert = certs.find((c) => full === c.path || full.startsWith(`${c.path}.`));
      // A cert whose file could not be read was already reported; its "missing certChain" is noise.
      if (cert && cert.failed) continue;
      const from = cert
        ? ` (from ${Object.entries(cert.files)
            .map(([k, f]) => `${k} ${f}`)
            .join(', ')})`
        : '';
      out.push({ path: full, message: `${err.message}${from}` });
    }
    return out;
  }
}

/**
 * Loads and validates the config file at `file`. Returns `{ errors, inputs }` on any problem, else
 * `{ errors: [], path, dir, proxy, admin, xdp, drainMs, files, inputs, hash }` where `proxy` is a
 * ProxyConfig with every cert file inlined and `files` the referenced files (certs, token file).
 */
function loadConfigFile(file) {
  const abs = path.resolve(file);
  const dir = path.dirname(abs);
  const inputs = [];
  const read = (p) => {
    try {
      const data = readBounded(p);
      inputs.push({ path: p, data });
      return { data };
    } catch (e) {
      inputs.push({ path: p, error: e.code || 'EIO' });
      return { error: describeFsError(e) };
    }
  };
  const errors = [];
  const done = () => ({ errors, inputs, hash: hashInputs(inputs), path: abs });
  const top = read(abs);
  if (top.error) {
    errors.push({ path: '', message: `cannot read ${abs}: ${top.error}` });
    return done();
  }
  const text = top.data.toString('utf8');
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    errors.push({ path: '', message: jsonErrorMessage(e, text) });
    return done();
  }
  if (!isPlainObject(doc)) {
    errors.push({ path: '', message: `must be a JSON object { proxy, admin?, xdp?, drainMs? }, got ${shown(doc)}` });
    return done();
  }
  const deep = tooDeep(doc);
  if (deep !== null) {
    errors.push({ path: deep, message: `nested deeper than ${MAX_CONFIG_DEPTH} levels` });
    return done();
  }
  unknownKeys(doc, TOP_KEYS, '', errors);

  let drainMs = DEFAULT_DRAIN_MS;
  if (doc.drainMs !== undefined && doc.drainMs !== null) {
    if (typeof doc.drainMs !== 'number' || !Number.isFinite(doc.drainMs) || doc.drainMs < 0 || doc.drainMs > MAX_DRAIN_MS) {
      errors.push({ path: 'drainMs', message: `must be a finite number of ms in [0, ${MAX_DRAIN_MS}], got ${shown(doc.drainMs)}` });
    } else drainMs = doc.drainMs;
  }
  const admin = doc.admin === undefined || doc.admin === null ? null : validateAdmin(doc.admin, dir, errors, read);
  const xdp = doc.xdp === undefined || doc.xdp === null ? null : validateXdp(doc.xdp, errors);

  let proxy = null;
  const routeFailures = [];
  if (doc.proxy === undefined || doc.proxy === null) {
    errors.push({ path: 'proxy', message: 'required: the ProxyConfig { listeners, routes, ... }' });
  } else if (!isPlainObject(doc.proxy)) {
    errors.push({ path: 'proxy', message: `must be an object (a ProxyConfig), got ${shown(doc.proxy)}` });
  } else {
    proxy = structuredClone(doc.proxy);
    const certs = inlineCertFiles(proxy, 'proxy', dir, errors, read, []);
    errors.push(...proxyErrors(proxy, certs, routeFailures));
  }
  if (errors.length) return done();
  const files = inputs.slice(1).map((i) => i.path);
  return { errors, path: abs, dir, proxy, admin, xdp, drainMs, files, inputs, hash: hashInputs(inputs), routeFailures };
}

/** An IP address as a BigInt and its family (4 or 6), or null. */
function ipValue(ip) {
  const family = net.isIP(ip);
  if (family === 4) return { family, value: ip.split('.').reduce((a, o) => (a << 8n) | BigInt(o), 0n) };
  if (family !== 6) return null;
  let text = ip;
  const v4 = /:(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4) {
    const n = ipValue(v4[1]).value;
    text = `${text.slice(0, v4.index)}:${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
  }
  const [head, tail] = text.includes('::') ? text.split('::') : [text, null];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = tail === null ? h : [...h, ...Array(8 - h.length - t.length).fill('0'), ...t];
  return { family, value: groups.reduce((a, g) => (a << 16n) | BigInt(`0x${g}`), 0n) };
}

/**
 * The families (`IPv4`, `IPv6`) whose every address lies in the union of `cidrs` (bare IPs and
 * `ip/len`; `::ffff:a.b.c.d/len` counts as IPv4, as the proxy matches it). Unparsable entries
 * are skipped (the proxy refuses them).
 */
function familiesCovered(cidrs) {
  const ranges = { 4: [], 6: [] };
  for (const c of cidrs) {
    if (typeof c !== 'string') continue;
    const [ip, len] = c.split('/');
    let a = ipValue(ip);
    if (!a) continue;
    let bits = a.family === 4 ? 32 : 128;
    let prefix = len === undefined ? bits : Number(len);
    if (!Number.isInteger(prefix) || prefix < 0 || prefix > bits) continue;
    if (a.family === 6 && prefix >= 96 && a.value >> 32n === 0xffffn) {
      a = { family: 4, value: a.value & 0xffffffffn };
      bits = 32;
      prefix -= 96;
    }
    const size = 1n << BigInt(bits - prefix);
    const start = (a.value / size) * size;
    ranges[a.family].push([start, start + size - 1n]);
  }
  const out = [];
  for (const [family, bits] of [
    [4, 32n],
    [6, 128n],
  ]) {
    const list = ranges[family].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
    let next = 0n;
    for (const [start, end] of list) {
      if (start > next) break;
      if (end + 1n > next) next = end + 1n;
    }
    if (next === 1n << bits) out.push(`IPv${family}`);
  }
  return out;
}

/**
 * What a valid load should warn about, as `{ code, path, message }` (one log line each):
 * a token file every user can read, and an `acceptProxyProtocol.trustedCidrs` that trusts every
 * address of a family (any client may then claim any address in a PROXY header).
 */
function configWarnings(loaded) {
  const out = [];
  const a = loaded.admin;
  if (a && a.tokenFile && a.tokenFileMode !== null && a.tokenFileMode & 0o004) {
    const mode = a.tokenFileMode.toString(8).padStart(4, '0');
    out.push({
      code: 'token_file_world_readable',
      path: 'admin.tokenFile',
      message: `${a.tokenFile} is readable by every user (mode ${mode}): anyone on this host can take the admin token; chmod 600 it (or 640 with the service's group)`,
    });
  }
  for (const f of loaded.routeFailures || []) {
    out.push({
      code: 'route_failed',
      path: f.path,
      message: `${f.message}: this route fails to build and is not served (the other routes are; see Route isolation)`,
    });
  }
  const listeners = loaded.proxy && Array.isArray(loaded.proxy.listeners) ? loaded.proxy.listeners : [];
  listeners.forEach((l, i) => {
    const app = l && l.acceptProxyProtocol;
    if (!app || !Array.isArray(app.trustedCidrs)) return;
    const families = familiesCovered(app.trustedCidrs);
    if (families.length === 0) return;
    out.push({
      code: 'trusted_cidrs_cover_all',
      path: `proxy.listeners[${i}].acceptProxyProtocol.trustedCidrs`,
      message: `covers every ${families.join(' and every ')} address: any client may send a PROXY header and pose as any address, past every per-IP limit; list only the load balancers' addresses`,
    });
  });
  return out;
}

/** `path: message` lines for people (the file itself is shown as `(file)`). */
function formatErrors(errors) {
  return errors.map((e) => `${e.path || '(file)'}: ${e.message}`);
}

module.exports = { loadConfigFile, readInputs, hashInputs, formatErrors, configWarnings, familiesCovered, DEFAULT_DRAIN_MS, MAX_FILE_BYTES };
