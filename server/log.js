'use strict';
/**
 * The server's event log: one line per event on stdout. `json` (the default) writes
 * `{"ts":"<ISO 8601>","event":"<name>",...payload}`; `text` writes
 * `<ts> <event> key=value ...` for people (strings with spaces or quotes, objects and arrays are
 * JSON-encoded). Writing never throws: a closed stdout (EPIPE) drops the line.
 */

const FORMATS = ['json', 'text'];

function textValue(v) {
  if (typeof v === 'string') return /^[^\s"=]+$/.test(v) ? v : JSON.stringify(v);
  if (v === null || typeof v !== 'object') return String(v);
  return JSON.stringify(v);
}

/** `{ event(name, payload) }` writing to `out` (a writable stream; default process.stdout). */
function createLogger({ format = 'json', out = process.stdout } = {}) {
  if (!FORMATS.includes(format)) throw new Error(`unknown log format ${JSON.stringify(format)}; expected one of: ${FORMATS.join(', ')}`);
  let broken = false;
  out.on?.('error', () => {
    broken = true;
  });
  function line(name, payload) {
    const ts = new Date().toISOString();
    if (format === 'json') return `${JSON.stringify({ ts, event: name, ...payload })}\n`;
    const parts = [ts, name];
    for (const [k, v] of Object.entries(payload || {})) {
      if (v !== undefined) parts.push(`${k}=${textValue(v)}`);
    }
    return `${parts.join(' ')}\n`;
  }
  return {
    format,
    event(name, payload = {}) {
      if (broken) return;
      try {
        out.write(line(name, payload));
      } catch {
        broken = true;
      }
    },
  };
}

module.exports = { createLogger, FORMATS };
