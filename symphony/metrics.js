'use strict';
/**
 * `SymphonyProxy#metrics()`: RampartProxy's counters in Symphony's shape (docs/symphony.md).
 *
 * - Breakdowns are arrays of `{ reason, count }`. A listener lists every reason, zeros included
 *   (a series exists before the first incident): Symphony's reasons in Symphony's order, then the
 *   reasons only Rampart counts. A route lists only its non-zero reasons, and never the pre-route
 *   ones (`no_route`, `http_header`), as Symphony does.
 * - Rampart reasons with a Symphony counterpart carry Symphony's name (ERROR_NAMES); several
 *   Rampart reasons may fold into one Symphony reason (their counts are summed), so every
 *   breakdown still sums to its total.
 * - `listeners[i].mode` comes from the config (the engine lists listeners in config order).
 */

/** Symphony's listener block reasons, in its order. Rampart uses the same names. */
const SYMPHONY_BLOCK_REASONS = [
  'max_connections',
  'cidr_blocked',
  'ja3_blocked',
  'ja4_blocked',
  'incomplete_handshake',
  'no_sni',
  'rate_limited',
  'too_many_connections',
  'penalty_boxed',
];

/** Symphony's error reasons, in its order. */
const SYMPHONY_ERROR_REASONS = [
  'no_route',
  'route_rate_limited',
  'suspend_unresolved',
  'tls_handshake',
  'tls_missing_cert',
  'upstream_connect',
  'idle_timeout',
  'stream',
  'http_header',
  'half_closed',
];

/** Error reasons Symphony counts on the listener only (no route is known when they happen). */
const PRE_ROUTE_ERRORS = new Set(['no_route', 'http_header']);

/**
 * Rampart error reason → the Symphony reason it is counted under. A reason not listed keeps its
 * Rampart name (Symphony has no counterpart: it is listed after Symphony's reasons).
 */
const ERROR_NAMES = {
  no_route: 'no_route',
  route_rate_limited: 'route_rate_limited',
  suspend_rejected: 'suspend_unresolved',
  suspend_timeout: 'suspend_unresolved',
  // A resolveConnection route that is not valid: Symphony closes the connection unresolved.
  resolve_route_invalid: 'suspend_unresolved',
  handshake_failed: 'tls_handshake',
  bad_client_hello: 'tls_handshake',
  upstream_connect_failed: 'upstream_connect',
  idle_timeout: 'idle_timeout',
  upstream_write_failed: 'stream',
  bad_request: 'http_header',
  half_close_timeout: 'half_closed',
};

/** Symphony's name for a Rampart error reason. */
function errorName(reason) {
  return Object.hasOwn(ERROR_NAMES, reason) ? ERROR_NAMES[reason] : reason;
}

/**
 * `{ reason: count }` (Rampart) → `[{ reason, count }]` in Symphony's names: `order` first, then
 * the rest in the engine's order; `keep(reason, count)` filters.
 */
function breakdown(byReason, order, rename, keep) {
  const sums = new Map(order.map((r) => [r, 0]));
  for (const [reason, count] of Object.entries(byReason || {})) {
    const name = rename(reason);
    sums.set(name, (sums.get(name) || 0) + count);
  }
  const out = [];
  for (const [reason, count] of sums) if (keep(reason, count)) out.push({ reason, count });
  return out;
}

const same = (r) => r;
const all = () => true;

/** One listener's counters in Symphony's shape. */
function listenerMetrics(l, mode) {
  return {
    address: l.address,
    mode,
    activeConnections: l.activeConnections,
    accepted: l.accepted,
    blocked: l.blocked,
    errors: l.errors,
    bytesReceived: l.bytesReceived,
    bytesSent: l.bytesSent,
    halfClosedConnections: l.halfClosedConnections,
    blockedByReason: breakdown(l.blockedByReason, SYMPHONY_BLOCK_REASONS, same, all),
    errorsByReason: breakdown(l.errorsByReason, SYMPHONY_ERROR_REASONS, errorName, all),
  };
}

/** One route's counters in Symphony's shape; `metricsGroup` only when the route set one. */
function routeMetrics(r, hasGroup) {
  const out = { route: r.route };
  if (hasGroup) out.metricsGroup = r.metricsGroup;
  Object.assign(out, {
    activeConnections: r.activeConnections,
    connections: r.connections,
    errors: r.errors,
    bytesReceived: r.bytesReceived,
    bytesSent: r.bytesSent,
    errorsByReason: breakdown(r.errorsByReason, SYMPHONY_ERROR_REASONS, errorName, (reason, count) => count > 0 && !PRE_ROUTE_ERRORS.has(reason)),
  });
  return out;
}

/**
 * Symphony's `ProxyMetrics` from RampartProxy's `metrics()`.
 * @param {object} m the engine's metrics
 * @param {{ modes: string[], groups: Map<string, boolean>, resolved: number }} ctx listener modes
 *   in config order; per route name, whether the route set `metricsGroup`; resolveConnection
 *   calls with a route that a held connection took (counted by the facade; those the engine then
 *   refused as not valid are subtracted here).
 */
function symphonyMetrics(m, ctx) {
  let unresolved = 0;
  let invalid = 0;
  for (const l of m.listeners) {
    const r = l.errorsByReason;
    unresolved += (r.suspend_rejected || 0) + (r.suspend_timeout || 0) + (r.resolve_route_invalid || 0);
    invalid += r.resolve_route_invalid || 0;
  }
  return {
    activeConnections: m.activeConnections,
    blockedConnections: m.blockedConnections,
    pendingSuspended: m.pendingSuspended,
    // A route the engine refused was taken by resolveConnection (counted in ctx.resolved), then
    // closed: unresolved, as in Symphony.
    suspendedResolved: ctx.resolved - invalid,
    suspendedUnresolved: unresolved,
    halfClosedConnections: m.halfClosedConnections,
    routes: m.routes,
    // Route isolation: routes left out because they failed to build, and routes serving their
    // last good certificate (which routes and why: rampartMetrics().routeFailures, and each
    // failure's 'error' route_failed).
    failingRoutes: m.failingRoutes,
    listeners: m.listeners.map((l, i) => listenerMetrics(l, ctx.modes[i] || 'tls')),
    routeMetrics: m.routeMetrics.map((r) => routeMetrics(r, ctx.groups.get(r.route.toLowerCase()) === true)),
  };
}

module.exports = { symphonyMetrics, errorName, SYMPHONY_BLOCK_REASONS, SYMPHONY_ERROR_REASONS, ERROR_NAMES };
