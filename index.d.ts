/// <reference types="node" />
// Types of the Rampart JS API (`require('rampart')` / `import ... from 'rampart'`). Written against
// @types/node (>= 20). Times are milliseconds unless a name says otherwise.
import { EventEmitter } from 'node:events';

/** PEM text or bytes. */
export type Pem = string | Buffer;

/** `explain(ip)`: one address across every tier that can refuse it. */
export interface Explanation {
  /** The address, canonical (an IPv4-mapped IPv6 address as IPv4). */
  ip: string;
  /** One entry per listener. */
  listeners: ListenerExplanation[];
  /** Kernel (XDP) bans covering the address; null when XDP is not attached. */
  kernel: { port: number; reason: 'dynamic' | 'penalty' | 'synFlood'; remainingMs: number }[] | null;
}

/** The engine's view of one address on one listener. */
export interface ListenerExplanation {
  port: number;
  /** The key it is tracked under: the address, or its IPv6 prefix (`ipv6PrefixLength`). */
  key: string;
  /**
   * The reason its next connection would be refused with, in the check order (`cidr_blocked`,
   * `dynamic_blocked`, `penalty_boxed`, `rate_limited`, `too_many_connections`,
   * `prefix_rate_limited`, `prefix_too_many_connections`); null: admitted (the listener budget
   * and handshake guards permitting). In observe mode the refusal is reported, not enforced.
   */
  verdict: string | null;
  /**
   * The reason `protection.shadow` would refuse its next connection with (`cidr_blocked`,
   * `rate_limited`, `too_many_connections`, `prefix_rate_limited`, `prefix_too_many_connections`,
   * `listener_overloaded`), reported, never enforced; null: the shadow admits it, or no shadow.
   */
  shadowVerdict: string | null;
  observe: boolean;
  /** The listener has protection. */
  protected: boolean;
  allowlisted: boolean;
  blocklisted: boolean;
  /** blockIp entries covering it on this listener (`node`: received from that cluster node). */
  dynamicBlocks: { cidr: string; port: number | null; reason?: string; node?: string }[];
  /** In the penalty box: ms left, escalation level, `note` for an HTTP/2-guard box, `node` when received. */
  penaltyBox: { remainingMs: number; level: number; note?: string; node?: string } | null;
  /** Penalty-box escalation level (boxes in a row). */
  escalationLevel: number;
  /** ms until rateLimit / sustained admit it again; null: they admit now. */
  retryAfterMs: number | null;
  /** Open connections, and maxConcurrentPerIp (0 = off). */
  active: number;
  maxConcurrent: number;
  pendingHandshakes: number;
  /** ms left on its known-good mark; null: not known-good. */
  knownGoodMs: number | null;
  /** It has an entry in the per-IP table. */
  tracked: boolean;
  /** Its prefix in the prefix tier (null without prefixLimit). */
  prefix: {
    cidr: string;
    tracked: boolean;
    penaltyBoxMs: number | null;
    retryAfterMs: number | null;
    active: number;
    maxConcurrent: number;
  } | null;
  defenseActive: boolean;
}

/** One live `blockIp` entry, as `dynamicBlocks()` lists it. */
export interface DynamicBlock {
  /** The blocked network, canonical (`192.0.2.7/32`, `2001:db8::/48`). */
  cidr: string;
  /** The one listener port it applies to; null: every listener (and listeners added later). */
  port: number | null;
  /** Milliseconds left (rounded up); absent: until unblockIp. */
  remainingMs?: number;
  /** The reason given to blockIp. */
  reason?: string;
  /** The cluster node (`nodeId`) it was received from; absent when made on this node. */
  node?: string;
}

/** A certificate chain (leaf first, then intermediates) and its private key (PKCS#8, PKCS#1 or SEC1). */
export interface CertConfig {
  certChain: Pem;
  privateKey: Pem;
  /**
   * A DER OCSP response for the leaf certificate, stapled to every full handshake that serves it
   * (HAProxy's `.ocsp` file beside the cert, nginx `ssl_stapling_file`). Must be a Buffer holding
   * one well-formed OCSPResponse with status successful; its signature, validity and subject are
   * not verified (the client does that). Refresh it with `updateConfig` (or, under `rampart
   * serve`, by rewriting its `ocspFile`). Resumed handshakes carry no staple. Default: none.
   */
  ocspResponse?: Buffer | Uint8Array;
}

/**
 * What an upstream speaks (`upstreams[].protocol`): a client goes only to upstreams that speak
 * the protocol it negotiated in ALPN (no ALPN counts as 'http/1.1'). An upstream without it is
 * 'http/1.1' beside upstreams that have one (Symphony's split: h2 clients go to the 'h2' ones
 * only); in a set where none has one it serves what the route offers (`http2`). 'any' serves
 * both in any set. An 'h2' upstream makes the route offer h2 (see `http2`); 'h2' upstreams get
 * HTTP/2 with prior knowledge (h2c) on terminated routes.
 */
export type UpstreamProtocol = 'h2' | 'http/1.1' | 'any';

/** What any upstream may carry beside its address (Symphony's upstream-level fields). */
export interface UpstreamCommon {
  protocol?: UpstreamProtocol;
  /**
   * Symphony's upstream-level affinity: a client IP goes back to the upstream it last used while
   * it reconnects within `ipAffinityTtlMs`. It applies to the whole set: every upstream that
   * gives it must give the same (else the route fails to build). Not beside the route's own
   * `ipAffinity`.
   */
  ipAffinity?: boolean;
  /** ms an upstream-level affinity entry lives after the client's last connection (needs ipAffinity). Default 300000. */
  ipAffinityTtlMs?: number;
  /**
   * Linux pid of the worker serving this upstream: its CPU use (`/proc/<pid>/task/<tid>/stat`,
   * or `/proc/<pid>/stat` without `tid`, sampled every ~250 ms off the connection path) breaks
   * ties of least-connections balancing (score = open connections × 1000 + CPU ‰). Makes
   * `balance` default to 'leastConnections'.
   */
  pid?: number;
  /** Linux thread id of the worker within `pid` (needs pid). */
  tid?: number;
}

export type UpstreamConfig =
  | ({ kind: 'tcp'; host: string; port: number } & UpstreamCommon)
  | ({ kind: 'uds'; path: string } & UpstreamCommon);

export interface RouteConfig {
  /** 'a.example.com' exact, '*.example.com' one more label, '' default. Case-insensitive. */
  sni: string;
  upstreams: UpstreamConfig[];
  /** Terminate TLS here (default true) or pass the raw bytes through (false). */
  terminateTls?: boolean;
  /** Route certificate; defaults to the listener's defaultCert. */
  cert?: CertConfig;
  /**
   * Offer ALPN h2 (and http/1.1 when an upstream serves it). Default: true when an upstream has
   * `protocol: 'h2'`, else false; false beside an 'h2' upstream, or true when every upstream is
   * 'http/1.1', is a ConfigError.
   */
  http2?: boolean;
  /**
   * Header sent to the upstream before any byte (PROXY v1/v2; v2 with the TLVs of docs/proxy.md:
   * PROXY v2 TLVs). Default 'none' (with a Unix-socket upstream: udsSourceAddressHeader).
   * 'xForwardedFor': `X-Forwarded-For: <client ip>` and `X-Forwarded-Proto: https` on every
   * HTTP/1.1 request, client copies removed (docs/proxy.md: Forwarded request headers; the route is
   * HTTP/1.1 only).
   */
  sourceAddressHeader?: 'none' | 'proxyProtocol' | 'proxyProtocolV2' | 'xForwardedFor';
  /**
   * Fingerprints forwarded: with 'proxyProtocolV2' in PROXY v2 TLVs (0xE0 JA3, 0xE1 JA4),
   * otherwise as `X-JA3` / `X-JA4` request headers on every HTTP/1.1 request. Default 'none'.
   */
  forwardFingerprint?: 'none' | 'ja3' | 'ja4' | Array<'ja3' | 'ja4'>;
  /** Upstream connect timeout, ms. Default 5000. */
  connectTimeoutMs?: number;
  /** Route-wide new-connection limit over all clients (GCRA), connections/s; excess → 'rate_limited'. */
  maxConnectionsPerSecond?: number;
  /** Burst for maxConnectionsPerSecond; defaults to the rate rounded up. */
  burst?: number;
  /**
   * What the route carries. Default 'opaque'; `http2: true` implies 'http'. On a terminated
   * 'http' route of a protected listener, `protection.slowRequest` applies.
   */
  protocol?: 'http' | 'opaque';
  /**
   * What may turn a terminated HTTP/1.1 connection of an HTTP route into a plain byte copy
   * (docs/proxy.md: What Rampart refuses on forwarding routes). `upgrade`: the `Upgrade` protocols
   * (HTTP tokens, any case; never 'h2c') a bodiless upgrade request may ask for, any other upgrade
   * is declined (its `Upgrade` removed, the request goes on as HTTP/1.1). Default ['websocket'].
   * `connect`: forward `CONNECT`; default false: Rampart answers it 405 and closes
   * (`errorsByReason.bad_request`). Only on a terminating route that carries HTTP.
   */
  tunnels?: { upgrade?: string[]; connect?: boolean };
  /**
   * Client certificates for this route (terminated routes only); replaces the listener's `mtls`.
   * `requireClientCert` defaults to false here. With `sourceAddressHeader: 'proxyProtocolV2'` the
   * facts ride a PP2_TYPE_SSL TLV (verify result, TLS version, subject CN).
   */
  mtls?: MtlsConfig;
  /** TLS versions, suites, groups and resumption for this route, replacing the listener's `tls` whole (terminated routes only). */
  tls?: TlsConfig;
  /** `group` label of this route's metrics (routeMetrics, Prometheus). Default: the route's name. */
  metricsGroup?: string;
  /**
   * Upstream capacity: how many requests (opaque routes: connections) may be in flight to the
   * upstreams at once. Default `{ mode: 'adaptive' }` on routes that carry HTTP (`protocol:
   * 'http'`, `http2`, an upstream `protocol`), `{ mode: 'off' }` otherwise. Route-table only.
   */
  concurrency?: ConcurrencyConfig;
  /**
   * Which upstream a new connection tries first: the one with the fewest open connections of this
   * route, or the next in turn. Default 'leastConnections' when every upstream is 'uds', else
   * 'roundRobin'.
   */
  balance?: 'leastConnections' | 'roundRobin';
  /** A client IP goes back to the upstream that last served it. Default false. */
  ipAffinity?: boolean;
  /** ms an affinity entry lives after the client's last connection (needs ipAffinity). Default 3600000. */
  ipAffinityTtlMs?: number;
  /**
   * Hold each connection of this route after its ClientHello and emit 'suspended'; JS decides
   * with `resolveConnection(id, route | null)`. `upstreams` may be left out or empty while
   * suspended (the resolved route brings its own). Default false.
   */
  suspended?: boolean;
  /** ms a suspended connection waits for resolveConnection, then is closed (`suspend_timeout`). Default 30000. */
  suspendTimeoutMs?: number;
}

/**
 * The route `resolveConnection` gives a suspended connection: a `routes[]` entry without the
 * route-table fields (`suspended`, `suspendTimeoutMs`, `maxConnectionsPerSecond`, `burst`,
 * `metricsGroup`, `ipAffinity`, `ipAffinityTtlMs`), with `upstream` (one, as Symphony has it) or
 * `upstreams`. `sni` is optional and unused (the connection's SNI is the client's).
 */
export type ResolveRoute = Omit<
  RouteConfig,
  'sni' | 'upstreams' | 'suspended' | 'suspendTimeoutMs' | 'maxConnectionsPerSecond' | 'burst' | 'metricsGroup' | 'ipAffinity' | 'ipAffinityTtlMs'
> & { sni?: string } & (
  | { upstream: UpstreamConfig; upstreams?: never }
  | { upstreams: UpstreamConfig[]; upstream?: never }
);

/** mTLS: client certificates verified against `clientCaCert` (PEM, one or more CA certificates). */
export interface MtlsConfig {
  clientCaCert: string | Buffer;
  /** Refuse a handshake without a client certificate. Default: true on a listener, false on a route. */
  requireClientCert?: boolean;
}

/** Protocol versions Rampart offers (rustls implements TLS 1.2 and 1.3 only). */
export type TlsVersion = 'TLSv1.2' | 'TLSv1.3';

/**
 * `tls` on a listener or route (docs/config.md: TLS options). Unset fields keep the defaults; a
 * route's `tls` replaces its listener's whole. Invalid names and combinations are ConfigErrors with
 * paths.
 */
export interface TlsConfig {
  /** Oldest version accepted. Default 'TLSv1.2' (nginx `ssl_protocols`, HAProxy `ssl-min-ver`). */
  minVersion?: TlsVersion;
  /** Newest version accepted. Default 'TLSv1.3' (HAProxy `ssl-max-ver`). */
  maxVersion?: TlsVersion;
  /**
   * Suites for both versions in preference order, by IANA name (`TLS_AES_128_GCM_SHA256`,
   * `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`) or OpenSSL name (`ECDHE-RSA-AES128-GCM-SHA256`).
   * Must leave a suite for each allowed version. Default: all nine AEAD suites.
   */
  cipherSuites?: string[];
  /**
   * Key exchange groups accepted: 'X25519MLKEM768' (post-quantum hybrid, TLS 1.3 only), 'X25519',
   * 'secp256r1' ('P-256', 'prime256v1'), 'secp384r1' ('P-384'). Default: all four.
   */
  groups?: string[];
  /** Our `cipherSuites` order wins over the client's (nginx `ssl_prefer_server_ciphers`). Default false. */
  preferServerCipherOrder?: boolean;
  /**
   * Stateless resumption tickets, TLS 1.2 and 1.3, sealed with keys rotated every
   * `ticketKeyRotationS`: a ticket resumes for one to two rotations. Keys are this node's, or
   * shared by every node with `cluster.shareTicketKeys`. Default true.
   */
  sessionTickets?: boolean;
  /**
   * Seconds between two ticket-key rotations (the lifetime hint sent is twice this). Integer in
   * [1, 302400]. Default 21600 (6 h). (HAProxy `tls-ticket-keys` and nginx
   * `ssl_session_ticket_key` rotate by hand.)
   */
  ticketKeyRotationS?: number;
  /** Server-side sessions kept per certificate (TLS 1.2 session ids); 0 = none. Integer in [0, 1000000]. Default 20000. */
  sessionCacheSize?: number;
}

export interface ProtectionConfig {
  /** Per-IP new-connection limit (GCRA). burst defaults to the rate. */
  rateLimit?: { connectionsPerSecond: number; burst?: number };
  /** Second, independent per-IP limit over a minute. */
  sustained?: { connectionsPerMinute: number; burst?: number };
  /** After any rate-limit exhaustion the IP is refused for durationMs (default 600000). */
  penaltyBox?: {
    durationMs?: number;
    /**
     * Recidive: a client (or prefix) boxed again within memoryMs of its last box's deadline is
     * boxed for the previous duration × factor, capped at maxDurationMs. Off unless given.
     * Defaults { factor: 2, maxDurationMs: 86400000, memoryMs: 86400000 }.
     */
    escalation?: { factor?: number; maxDurationMs?: number; memoryMs?: number };
  };
  /** Simultaneous connections per IP; 0 = off. */
  maxConcurrentPerIp?: number;
  /**
   * Shadow rules: limits and lists evaluated on every connection beside the enforced ones and
   * reported ('blocked' with `shadow: true`, `metrics().listeners[].shadowByReason`,
   * `rampart_shadow_refusals_total`), never enforced — to try a tighter rule on live traffic
   * before enforcing it. Each field as in the enforced policy (`blocklist` → 'cidr_blocked',
   * `prefixLimit` → 'prefix_rate_limited' / 'prefix_too_many_connections', `listenerLimit` →
   * 'listener_overloaded'); a shadow refusal is reported only for a connection the enforced policy
   * admitted, and an allowlisted client is never evaluated. Not given: no shadow.
   */
  shadow?: {
    blocklist?: string[];
    rateLimit?: { connectionsPerSecond: number; burst?: number };
    sustained?: { connectionsPerMinute: number; burst?: number };
    maxConcurrentPerIp?: number;
    prefixLimit?: {
      ipv4PrefixLength?: number;
      ipv6PrefixLength?: number;
      connectionsPerSecond?: number;
      burst?: number;
      maxConcurrent?: number;
    };
    /** Only the rate: `maxPendingHandshakes` has no shadow (a ConfigError). */
    listenerLimit?: { connectionsPerSecond: number; burst?: number };
  };
  /** CIDRs (a bare IP is /32 or /128) that skip every check. */
  allowlist?: string[];
  /** CIDRs refused at accept (reason cidr_blocked). */
  blocklist?: string[];
  /** 32-hex JA3 MD5 strings, case-insensitive. */
  ja3Blocklist?: string[];
  /** 36-char JA4 strings, case-insensitive. */
  ja4Blocklist?: string[];
  /** Whole TLS handshake from accept, ms. Default 10000; 0 = the default (as in Symphony). */
  tlsHandshakeTimeoutMs?: number;
  /** Refuse ClientHellos without server_name. Default false. */
  requireSni?: boolean;
  /** IPv6 clients share per-IP state by this prefix. Default 64. */
  ipv6PrefixLength?: number;
  /** Hard cap on per-IP entries. Default 1000000. */
  maxTrackedIps?: number;
  /** Slowloris guard before the TLS handshake completes. Default { maxPendingPerIp: 64, minBytesPerSecond: 0 }. */
  slowHandshake?: { maxPendingPerIp?: number; minBytesPerSecond?: number };
  /** 'observe' decides and reports but admits everything. Default 'enforce'. */
  mode?: 'enforce' | 'observe';
  /**
   * The kernel layer (applies while XDP is attached). `synPerSecond`/`synBurst`: per-source SYN
   * limit (a source over it is banned for penaltyBox.durationMs). `synBudgetPerSecond`: SYNs per
   * second this port admits from sources that are not known-good (a spoofed-source flood is
   * shed beyond it; known-good clients always pass). `maxBans`: entries of the kernel ban maps
   * (default: the largest maxTrackedIps of the protected listeners; 1024..16777216; read at
   * attachXdp). `dropFragments`: drop every IP fragment on the interface (default false).
   */
  xdp?: {
    synPerSecond?: number;
    synBurst?: number;
    synBudgetPerSecond?: number;
    maxBans?: number;
    dropFragments?: boolean;
  };
  /**
   * The HTTP/2 guard of terminated connections whose ALPN is h2 (on by default on every listener,
   * also without protection). A violation closes the connection with GOAWAY ENHANCE_YOUR_CALM and
   * is reported 'h2_flood' with its `detail`.
   */
  http2?: Http2GuardConfig;
  /**
   * A second tier keyed by network prefix (default /24 and /48), checked after the per-client
   * limits: 'prefix_rate_limited' / 'prefix_too_many_connections'; with a penaltyBox the whole
   * prefix is boxed (its clients get 'penalty_boxed'). Needs connectionsPerSecond or maxConcurrent.
   */
  prefixLimit?: {
    ipv4PrefixLength?: number;
    ipv6PrefixLength?: number;
    connectionsPerSecond?: number;
    burst?: number;
    maxConcurrent?: number;
  };
  /**
   * A budget over every client of the listener that is not known-good: 'listener_overloaded'.
   * Needs connectionsPerSecond or maxPendingHandshakes.
   */
  listenerLimit?: { connectionsPerSecond?: number; burst?: number; maxPendingHandshakes?: number };
  /** How long a client stays known-good after a clean exchange (ms). Default 3600000. */
  knownGoodTtlMs?: number;
  /** Defense mode. Default { mode: 'off', sigma: 3, minConnectionsPerSecond: 100, holdMs: 30000, factor: 0.25, newClientMaxPending: 1, handshakeTimeoutMs: 3000 }. */
  defense?: {
    mode?: 'off' | 'auto' | 'on';
    sigma?: number;
    minConnectionsPerSecond?: number;
    holdMs?: number;
    factor?: number;
    newClientMaxPending?: number;
    handshakeTimeoutMs?: number;
  };
  /** Request deadlines on terminated HTTP routes. Default { headTimeoutMs: 10000, keepAliveTimeoutMs: 75000, maxRequestsPerConnection: 1000 }. */
  slowRequest?: {
    /** ms from the end of the handshake to a complete first request head, and on HTTP/1.1 from the first byte of each later head to its end: 'slow_request'. */
    headTimeoutMs?: number;
    /** ms an HTTP/1.1 connection may wait for its next request once every response has passed; then it is closed (not a refusal). */
    keepAliveTimeoutMs?: number;
    /** Requests per HTTP/1.1 connection: the last is sent with `Connection: close`, a further one closes the connection. 0 = no cap. */
    maxRequestsPerConnection?: number;
  };
  /**
   * HTTP request budgets (GCRA) per client over all its connections, and optionally per prefix
   * (prefixLimit's prefix lengths, else /24 and /48). An HTTP/1.1 request over budget is not
   * forwarded: Rampart answers 429 with Retry-After, RateLimit-Policy and RateLimit, closes the
   * connection and reports 'request_rate_limited'. Bursts default to the rates rounded up.
   */
  requestLimit?: {
    /** Requests per second per client. */
    requestsPerSecond: number;
    /** Requests at once from a quiet client. */
    burst?: number;
    /** Requests per second per prefix, all its clients together. */
    prefixRequestsPerSecond?: number;
    /** Requests at once from a quiet prefix (needs prefixRequestsPerSecond). */
    prefixBurst?: number;
  };
  /**
   * A per-client limit over every node of the cluster (needs ProxyConfig `cluster`): a GCRA on
   * Redis, refused 'cluster_rate_limited'. Each node admits from a local lease of `lease` tokens
   * (default ceil(connectionsPerSecond / 10), at most burst); worst-case over-admission is
   * nodes × lease. Burst defaults to the rate rounded up.
   */
  clusterRateLimit?: { connectionsPerSecond: number; burst?: number; lease?: number };
}

/** `protection.http2`; every limit is per connection, and the three rates are also counted per client over all its connections (× clientFactor). */
export interface Http2GuardConfig {
  /** false turns the guard off for this listener. Default true. */
  enabled?: boolean;
  /** Client streams open at once: announced in Rampart's own SETTINGS right after the handshake (also with enabled: false), and the upstream's SETTINGS_MAX_CONCURRENT_STREAMS is lowered to it. Default 100. */
  maxConcurrentStreams?: number;
  /** New client streams per second (GCRA, burst maxConcurrentStreams). Default 100000. */
  maxStreamsPerSecond?: number;
  /** RST_STREAM that end an open stream, from the client or the upstream, per second (burst 2x). Default 50. */
  maxResetsPerSecond?: number;
  /** Bytes of one HEADERS + CONTINUATION block. Default 65536. */
  maxHeaderBlockBytes?: number;
  /** CONTINUATION frames in one header block. Default 16. */
  maxContinuationFrames?: number;
  /** SETTINGS, PING, PRIORITY, zero WINDOW_UPDATE, empty DATA per second (burst 2x). Default 100. */
  maxControlFramesPerSecond?: number;
  /** Violations by one client within 60 s that penalty-box it (penaltyBox.durationMs, 600000 without); a rapid_reset boxes at the first. Default 3. */
  boxAfterViolations?: number;
  /** A client's stream, reset and control-frame budgets over all its connections: the per-connection rates and bursts × this, in [1, 1000]. Default 2. */
  clientFactor?: number;
  /** Client streams over one connection's lifetime; the stream that reaches it is followed by a graceful GOAWAY (NO_ERROR), not a violation. Default 10000. */
  maxStreamsPerConnection?: number;
}

/** The limit an 'h2_flood' exceeded (the 'blocked' event's `detail`). */
export type H2FloodDetail =
  | 'concurrent_streams'
  | 'stream_rate'
  | 'rapid_reset'
  | 'header_block'
  | 'continuation'
  | 'control_frames';

export interface ListenerConfig {
  /** IP to bind. Default '0.0.0.0'; '::' also accepts IPv4 (dual-stack). */
  host?: string;
  /**
   * Several listeners may share a port on different hosts (no duplicate host, no specific address
   * beside a wildcard that takes it); the port names all of them and they share one policy.
   */
  port: number;
  /**
   * 'tls' (default): SNI routing. 'http': plain HTTP/1.1 — `GET /.well-known/acme-challenge/<token>`
   * is proxied to the route whose `sni` matches Host, everything else gets 301 to https; no Host
   * → 400, Host without a route → 404, a head over 16 KiB → 431. Takes no `defaultCert`.
   */
  mode?: 'tls' | 'http';
  /**
   * Connections from these load balancers must begin with a PROXY v1/v2 header; its client is
   * then the client for every check, event, list, metric and outbound `sourceAddressHeader`.
   */
  acceptProxyProtocol?: AcceptProxyProtocolConfig;
  defaultCert?: CertConfig;
  /** Concurrent connections on this listener; 0 = unlimited (default). */
  maxConnections?: number;
  /** Close after this many ms with no byte either way; 0 = no idle timeout (as in Symphony). Default 60000. */
  idleTimeoutMs?: number;
  protection?: ProtectionConfig;
  /** Client certificates on this listener's terminated routes (`requireClientCert` default true). */
  mtls?: MtlsConfig;
  /** TLS versions, suites, groups and resumption of this listener's terminated routes. */
  tls?: TlsConfig;
  /**
   * Connections of suspended routes this listener holds at once; beyond it a new one is closed
   * at once (`errorsByReason.suspend_queue_full`, no 'suspended' event). Default 1024.
   */
  maxPendingSuspended?: number;
  /**
   * `mode: 'http'` only: a request that is not an ACME challenge gets its 301 to https whatever
   * its Host (Symphony's HTTP listener), instead of 404 for a Host no route matches; an ACME
   * request for such a Host is still 404. Default false (SymphonyProxy: true).
   */
  redirectUnknownHosts?: boolean;
}

/** `listeners[].acceptProxyProtocol`. */
export interface AcceptProxyProtocolConfig {
  /** CIDRs (or bare IPs) of the trusted balancers; at least one. */
  trustedCidrs: string[];
  /** ms from accept to the end of the header (else closed, `proxy_header_invalid`). Default 3000. */
  timeoutMs?: number;
}

/** `routes[].concurrency` (docs/protection.md: Upstream capacity). */
export interface ConcurrencyConfig {
  /**
   * 'adaptive': a limit learned from response-head latency (grows while latency stays near its
   * no-load baseline, shrinks when it rises past baseline × tolerance + 0.5 ms, never while it is
   * under `latencyFloorMs`); 'fixed': `limit`
   * (HAProxy `maxconn`); 'off': unlimited, still measured (long-polling routes).
   */
  mode?: 'adaptive' | 'fixed' | 'off';
  /** The static limit of 'fixed' (required there, refused otherwise), 1..1000000. */
  limit?: number;
  /** 'adaptive' only: lowest limit. Default 10. */
  minLimit?: number;
  /** 'adaptive' only: highest limit. Default 10000. */
  maxLimit?: number;
  /** 'adaptive' only: the limit before anything is learned, within [minLimit, maxLimit]. Default 20 (or minLimit when higher): requests past it wait while it grows. */
  initialLimit?: number;
  /** 'adaptive' only: latency rise over the baseline tolerated, 1..10. Default 1.25. */
  tolerance?: number;
  /**
   * 'adaptive' only: a response latency under this many ms never shrinks the limit, however far
   * above the baseline (an upstream answering within it, queue included, is not drowning),
   * 0..10000. Default 10.
   */
  latencyFloorMs?: number;
  /**
   * Share of the limit reserved to clients known-good since 10 s before the overload began,
   * 0..0.9 (at least one slot when > 0; 0 = none). Default 0.2.
   */
  priorityShare?: number;
  /** `Retry-After` (s) of an answer refused for lack of capacity, 1..3600. Default 1. */
  retryAfterS?: number;
  /**
   * ms a request past the limit waits for room (known-good clients first, first come first
   * served within a class) before it is refused, 0..60000; 0 = no queue. Checked every 100 ms.
   * HAProxy `timeout queue`. Default 1000.
   */
  queueTimeoutMs?: number;
  /** Requests (HTTP/2: connections holding a new stream) waiting at once, 0..1000000; 0 = no queue. HAProxy `maxqueue`. Default 1024. */
  maxQueue?: number;
}

export interface ProxyConfig {
  listeners: ListenerConfig[];
  routes: RouteConfig[];
  /**
   * Route isolation (default true): a route that fails to build — its certificate, key or mTLS CA
   * does not load or match, its fields conflict with each other or with the listeners, its `sni`
   * repeats an earlier route's — is dropped and reported (`'error'` `route_failed`,
   * `metrics().failingRoutes`), and the other routes serve; on updateConfig a route whose
   * certificate alone failed keeps the live route's last good certificate (`lastGoodCert`); a
   * `routes` list in which no route serves still throws. A field's own problem (type, range, unknown name) always fails
   * the whole config. With false any failure throws, for the constructor and `updateConfig`.
   */
  isolateRoutes?: boolean;
  /**
   * Connection worker threads, each with its own event loop and one SO_REUSEPORT socket per
   * listener; a connection stays on the worker that accepted it. Default: CPU count (1–256).
   */
  workerThreads?: number;
  /** 'blocked' events per second before they are only counted. Default { maxPerSecond: 1000 }. */
  blockedEvents?: { maxPerSecond?: number };
  /**
   * `eventLoopDelayMs` (1..60000): when this process's event-loop delay (sampled every 100 ms)
   * passes it, every route counts as overloaded and its adaptive limit shrinks. Default: ignored.
   */
  overload?: { eventLoopDelayMs?: number };
  /**
   * TCP keepalive on client and TCP upstream sockets. Default `{ enabled: true, idleMs: 300000,
   * intervalMs: 30000, retries: 5 }`; `idleMs`/`intervalMs` are whole seconds in ms
   * (1000..32767000), `retries` 1..127.
   */
  tcpKeepalive?: { enabled?: boolean; idleMs?: number; intervalMs?: number; retries?: number };
  /**
   * Once the upstream ended its side and the client has not, close the connection after this
   * many ms without a byte from the client (each byte restarts the wait); 0 = no bound. A client
   * that ended its side first is not bounded (its response may be slow). As in Symphony. Default
   * 300000.
   */
  halfCloseTimeoutMs?: number;
  /**
   * The sourceAddressHeader of a route (also of updateConfig and resolveConnection) that sets none
   * and has a Unix-socket upstream. Default 'none'; Symphony sends 'proxyProtocol' there.
   */
  udsSourceAddressHeader?: 'none' | 'proxyProtocol' | 'proxyProtocolV2';
  /**
   * Symphony's route rules, for every route the proxy parses (constructor, updateConfig,
   * resolveConnection); fixed at construction. Route-build failures (the route is set apart by
   * route isolation: 'error' route_failed, failingRoutes, routeFailures, rampart_failing_routes):
   * `sourceAddressHeader: 'xForwardedFor'` with `http2: true` (path `routes[i].http2`); on a
   * route-table route that is not suspended, upstreams all `protocol: 'h2'`
   * (`routes[i].upstreams`) or an `'h2'` upstream with `terminateTls: false`
   * (`routes[i].terminateTls`). A route writing request headers (`xForwardedFor`, or a header
   * `forwardFingerprint`) must declare `protocol: 'http'` (`routes[i].protocol`): a whole-config
   * problem, or part of the route's failure when it also fails a build rule. A constructor whose
   * every route fails a build rule serves none instead of throwing. Default false; SymphonyProxy
   * sets it.
   */
  symphonyRouteRules?: boolean;
  /** Copy-loop read size in bytes, both directions (512..1048576). Default 16384 / 65536. */
  readBufferSize?: number;
  /** Read size for bytes from the client (512..1048576). Default `readBufferSize`, else 16384. */
  clientReadBufferSize?: number;
  /** Read size for bytes from the upstream (512..1048576). Default `readBufferSize`, else 65536. */
  upstreamReadBufferSize?: number;
  /** The cluster tier on Redis: shared bans, clusterRateLimit, circuit breaker. */
  cluster?: ClusterConfig;
}

export interface ClusterConfig {
  redis: {
    /** 'redis://[user:pass@]host:port[/db]' or 'unix:///path'. */
    url: string;
    /** Prefix of every key and channel. Default 'rampart:'. */
    keyPrefix?: string;
    /** Default 1000 (ms). */
    connectTimeoutMs?: number;
    /** A command slower than this counts as a failure. Default 200 (ms). */
    commandTimeoutMs?: number;
  };
  /** This node's name in ban messages and blockedIps({detail:true}).node. Default 'hostname:pid'. */
  nodeId?: string;
  /** Publish local bans and apply the other nodes'. Default true. */
  shareBans?: boolean;
  /**
   * Every node seals and opens TLS session tickets with the same rotating keys, kept in Redis,
   * so a session made on one node resumes on any (HAProxy `tls-ticket-keys`, nginx
   * `ssl_session_ticket_key`, without the key files). Default false.
   */
  shareTicketKeys?: boolean;
  /** After `failures` failed commands Redis is not asked for `openMs`. Default { failures: 3, openMs: 1000 }. */
  breaker?: { failures?: number; openMs?: number };
}

export type BlockReason =
  | 'cidr_blocked'
  | 'dynamic_blocked'
  | 'penalty_boxed'
  | 'rate_limited'
  | 'too_many_connections'
  | 'max_connections'
  | 'no_sni'
  | 'ja3_blocked'
  | 'ja4_blocked'
  | 'incomplete_handshake'
  | 'handshake_timeout'
  | 'slow_handshake'
  | 'h2_flood'
  | 'prefix_rate_limited'
  | 'prefix_too_many_connections'
  | 'listener_overloaded'
  | 'slow_request'
  | 'cluster_rate_limited'
  | 'request_rate_limited'
  /**
   * The route's upstream is at its concurrency limit (routes[].concurrency) and the client is not
   * known-good since before the overload: a new connection closed before TLS, an HTTP/1.1 request
   * answered 503 with Retry-After, an HTTP/2 connection ended with GOAWAY NO_ERROR.
   */
  | 'upstream_overloaded';

export interface BlockedEvent {
  ip: string;
  /** The listener's port. */
  port: number;
  /** 'host:port' of the listener. */
  listener: string;
  reason: BlockReason;
  /** 32-hex MD5, '' when the ClientHello was not read. */
  ja3: string;
  /** JA4, '' when the ClientHello was not read. */
  ja4: string;
  /** True when the connection was admitted anyway: observe mode, or a shadow refusal. */
  observed: boolean;
  /** Which limit, for reason 'h2_flood'; '' for every other reason. */
  detail: H2FloodDetail | '';
  /** Present (true) only on a refusal of `protection.shadow`: reported, never enforced (reason 'cidr_blocked', 'rate_limited', 'too_many_connections', 'prefix_rate_limited', 'prefix_too_many_connections' or 'listener_overloaded'). */
  shadow?: true;
}

export interface BlockedSummary {
  intervalMs: number;
  total: number;
  byReason: Partial<Record<BlockReason, number>>;
  topIps: { ip: string; count: number }[];
}

/** Defense mode turned on or off on one listener. */
export interface DefenseEvent {
  port: number;
  /** 'host:port' of the listener. */
  listener: string;
  active: boolean;
  /** New connections in the last second measured. */
  rate: number;
  /** max(minConnectionsPerSecond, mean + sigma × deviation) that second was compared with. */
  threshold: number;
}

/** A route became overloaded (a refusal for lack of upstream capacity) or recovered (2 s without one). */
export interface OverloadEvent {
  /** The route's name (its `sni`, '' = default route). */
  route: string;
  on: boolean;
  inFlight: number;
  /** The limit (null with mode 'off'). */
  limit: number | null;
  /** Mean response-head latency of the last measured window, ms. */
  latencyMs: number;
  /** No-load latency baseline, ms. */
  baselineMs: number;
}

/**
 * A ban's lifecycle: a penalty box, a kernel ban or a `blockIp` entry started, moved its deadline,
 * rose a level, ended at its deadline or was lifted. Changes are coalesced per ban every 100 ms
 * (a client knocking while boxed gives one 'extend' per 100 ms at most) and capped at
 * `blockedEvents.maxPerSecond` 'ban' events a second (the excess counts in `eventsDropped`).
 */
export interface BanEvent {
  /**
   * 'start' (a new ban at level 0), 'extend' (its deadline moved forward), 'escalate' (a new ban
   * at a level above 0: the previous one ended within `penaltyBox.escalation.memoryMs`),
   * 'expire' (the deadline passed), 'lift' (`unblockIp` removed it).
   */
  action: 'start' | 'extend' | 'escalate' | 'expire' | 'lift';
  /**
   * 'local' (this node's engine: rate limit, prefix tier, HTTP/2 guard), 'kernel' (the penalty box
   * was written to the XDP ban map, or the kernel extended it: the source kept sending SYNs over
   * its rate), 'cluster' (a ban received from another node), 'operator'
   * (`blockIp`, `unblockIp`, the admin API).
   */
  origin: 'local' | 'kernel' | 'cluster' | 'operator';
  /** The `nodeId` of the node a 'cluster' box came from; null otherwise or when unknown (a `blockIp` of another node). */
  node: string | null;
  /** The address ('203.0.113.7') or, for a prefix, the CIDR ('203.0.113.0/24'). */
  ip: string;
  /** The listener's port; null for a `blockIp` entry of every listener. */
  port: number | null;
  /** 'host:port' of the listener; null when `port` is null. */
  listener: string | null;
  /**
   * What earned it: 'rate_limited', 'prefix_rate_limited', 'h2_flood', 'penalty_boxed' (a box of
   * another node, or the kernel's copy of a box), 'dynamic_blocked' (`blockIp`).
   */
  reason: string;
  /** The `reason` given to `blockIp`; null otherwise. */
  note: string | null;
  /** Escalation level (0 without `penaltyBox.escalation`). */
  level: number;
  /** Ms until the deadline when the event was made (0 for 'expire'); null for a `blockIp` without `ttlMs`. */
  remainingMs: number | null;
  /** The deadline as Unix ms (compare with `Date.now()`); null for a `blockIp` without `ttlMs`. */
  expiresAt: number | null;
}

export interface ErrorEvent {
  /** `upstream_connect_failed`, `handshake_failed`, ..., `upstream_protocol_mismatch` (the upstream answered in another protocol than the connection speaks), `resolve_route_invalid` (resolveConnection gave a route that is not valid: the connection was closed), `route_failed` (a route failed to build and is not served: `route`, `index`, `errors` are set), `xdp_sync_failed` (a kernel-map write failed), `cluster_unavailable` (Redis unreachable: once per outage, local limits alone apply), or `cluster_message_rejected` (ban messages or keys from Redis failed validation: at most once a second, the message starting with the count since the previous one). */
  code: string;
  message: string;
  ip: string | null;
  /** The listener's port; null for proxy-wide errors (`xdp_sync_failed`, `cluster_unavailable`, `cluster_message_rejected`). */
  port: number | null;
  /** 'host:port' of the listener; null for proxy-wide errors. */
  listener: string | null;
  /** `route_failed` only: the route's `sni` as written (null when it was not a string). */
  route?: string | null;
  /** `route_failed` only: the route's index in `routes`. */
  index?: number;
  /**
   * `route_failed`: every problem, paths under `routes[index]`. `resolve_route_invalid`: every
   * problem of the route given to resolveConnection, paths under `route` (`route.upstream.port`).
   * Each `{ path, message }` as in a ConfigError; the message spells out the same list.
   */
  errors?: ConfigErrorEntry[];
  /** `route_failed` only: its certificate alone failed and it serves the live route's last good one (updateConfig). */
  lastGoodCert?: boolean;
}

/** A connection of a suspended route, held until `resolveConnection(id, route | null)`. */
export interface SuspendedEvent {
  /** Opaque id for resolveConnection (a decimal string, never reused by this proxy). */
  id: string;
  /** The ClientHello's server_name as sent; '' without one. */
  sni: string;
  /** The client's IP (from a trusted PROXY header when one named it). */
  peerIp: string;
  peerPort: number;
  /** 'host:port' of the listener. */
  listener: string;
}

export interface BlockedIps {
  rateLimited: string[];
  concurrencyLimited: string[];
  cidrBlocklist: string[];
  penaltyBoxed: string[];
  dynamicBlocklist: string[];
}

export interface BlockedDetail {
  ip: string;
  port: number;
  reason: BlockReason;
  /** Ms until let in again, when known. */
  remainingMs?: number;
  /**
   * The `reason` text given to blockIp, for dynamic blocks; 'prefix' for a boxed prefix (local or
   * received from another node); for other entries why they are listed ('boxed by
   * protection.http2.boxAfterViolations', 'banned in the kernel by xdp.synPerSecond', and with
   * `cluster` 'penalty box from node X' / 'kernel SYN ban from node X' for received bans).
   */
  note?: string;
  /** With `cluster`: the nodeId the ban came from (this node's for its own). */
  node?: string;
}

export interface BlockedIpsDetail {
  rateLimited: BlockedDetail[];
  concurrencyLimited: BlockedDetail[];
  cidrBlocklist: BlockedDetail[];
  penaltyBoxed: BlockedDetail[];
  dynamicBlocklist: BlockedDetail[];
}

export interface ListenerMetrics {
  address: string;
  port: number;
  activeConnections: number;
  /** Connections half-closed now: the upstream ended its side, the client has not (halfCloseTimeoutMs). */
  halfClosedConnections: number;
  accepted: number;
  blocked: number;
  blockedByReason: Record<BlockReason, number>;
  /** 'h2_flood' refusals by detail (they sum to blockedByReason.h2_flood). */
  h2FloodByDetail: Record<H2FloodDetail, number>;
  /** Connections `protection.shadow` would have refused (all admitted), by reason. */
  shadowByReason: {
    cidr_blocked: number;
    rate_limited: number;
    too_many_connections: number;
    prefix_rate_limited: number;
    prefix_too_many_connections: number;
    listener_overloaded: number;
  };
  errors: number;
  /** By reason: no_route, bad_client_hello, client_closed, ..., proxy_header_invalid (acceptProxyProtocol), no_upstream_for_alpn (upstreams[].protocol), suspend_rejected, suspend_timeout, suspend_queue_full (suspended routes). */
  errorsByReason: Record<string, number>;
  bytesReceived: number;
  bytesSent: number;
  trackedIps: number;
  /** Clients admitted without a per-IP entry: the table was at maxTrackedIps and every candidate held connections. */
  untrackedAdmissions: number;
  /** Prefix entries of the prefix tier. */
  trackedPrefixes: number;
  /** Clients holding a known-good mark. */
  knownGoodClients: number;
  /** Defense mode on (1) or off (0). */
  defenseActive: 0 | 1;
  /** Connections of suspended routes this listener holds now (at most maxPendingSuspended). */
  pendingSuspended: number;
}

export interface XdpStatus {
  attached: boolean;
  /** '' when not attached. */
  interface: string;
  /** 'none' when not attached. */
  mode: 'native' | 'generic' | 'none';
  counters: {
    passed: number;
    dropped: {
      cidr: number;
      dynamic: number;
      penalty: number;
      synFlood: number;
      unparsed: number;
      /** SYNs from sources that are not known-good beyond xdp.synBudgetPerSecond. */
      synBudget: number;
      /** UDP / UDP-Lite / SCTP / DCCP packets to a protected port. */
      nonTcp: number;
      /** IP fragments dropped by xdp.dropFragments. */
      fragment: number;
    };
    /** Sources the kernel banned for SYN excess (xdp.synPerSecond). */
    banned: number;
    /** Kernel ban deadlines moved forward by continued SYN excess. */
    banExtended: number;
  };
  bannedIps: string[];
  /** Failed kernel-map writes since start (each also an 'error' event `xdp_sync_failed`). */
  errors: number;
  /** Penalty boxes not mirrored as kernel bans because the ban queue was full. */
  banQueueOverflow: number;
  /** Entries the sized kernel maps were created with (0 when not attached). */
  maps: { bans: number; prefixBans: number; synStates: number; knownGood: number };
  /** Known-good marks not mirrored to the kernel because their queue was full. */
  knownGoodQueueOverflow: number;
  /** Known-good marks (and their refreshes, about twice per knownGoodTtlMs) written to the kernel. */
  knownGoodMirrored: number;
}

export interface Metrics {
  activeConnections: number;
  /** listeners[].halfClosedConnections summed. */
  halfClosedConnections: number;
  acceptedConnections: number;
  blockedConnections: number;
  eventsDropped: number;
  trackedIps: number;
  /** Connections of suspended routes held now, over every listener (Symphony's pendingSuspended). */
  pendingSuspended: number;
  listeners: ListenerMetrics[];
  /** Per route of the live table, in config order. */
  routeMetrics: RouteMetrics[];
  /** Routes in the live table (Symphony's `routes`). */
  routes: number;
  /** Configured routes left out because they failed to build (Symphony's `failingRoutes`). */
  failingRoutes: number;
  /** Those routes, with every problem. */
  routeFailures: { route: string | null; index: number; errors: ConfigErrorEntry[]; lastGoodCert: boolean }[];
  /** Routes that failed to build since the proxy was created (once per constructor or updateConfig that gave them). */
  routeFailuresTotal: number;
  xdp?: XdpStatus;
  /** With `cluster`. */
  cluster?: ClusterMetrics;
}

export interface ClusterMetrics {
  nodeId: string;
  /** Redis answers and the ban channel is subscribed. */
  connected: boolean;
  /** Redis is not asked; local limits alone apply. */
  breakerOpen: boolean;
  bansPublished: number;
  bansReceived: number;
  leaseRefills: number;
  /** Failed or timed-out Redis commands. */
  errors: number;
  /** Bans or refill requests dropped because a queue was full. */
  queueOverflow: number;
  /**
   * Ban messages (the ban channel) and ban keys (loaded at start and after reconnects) read from
   * Redis that failed validation and were dropped: a CIDR with host bits or out of its kind's
   * prefix lengths, a TTL over 2^53-1 ms, a note over 200 characters, a bad port or `node`, a
   * message naming this node that it did not publish, malformed JSON, over 4096 bytes. Reported
   * as `'error'` `cluster_message_rejected` at most once a second.
   */
  rejectedMessages: number;
  /** Clients holding a clusterRateLimit lease entry. */
  leaseClients: number;
  /** Shared ticket-key sets read from Redis that changed this node's keys (`shareTicketKeys`: the first, then one per rotation). */
  ticketKeyUpdates: number;
  /** Delay from a ban's origin to this node (wall clocks), over the newest 1024 messages. */
  propagationDelayMs: { count: number; p50: number; p99: number; max: number };
}

/** `metrics().routeMetrics[i]`: one route's counters (Symphony-compatible). */
export interface RouteMetrics {
  /** The route's `sni` as configured, normalised ('' = default route). */
  route: string;
  /** `routes[].metricsGroup` (default: the route's name). */
  metricsGroup: string;
  activeConnections: number;
  /** Connections routed here and let through the route's limit. */
  connections: number;
  errors: number;
  bytesReceived: number;
  bytesSent: number;
  /** Same keys as a listener's errorsByReason; a route-limit refusal is 'route_rate_limited'. */
  errorsByReason: Record<string, number>;
  /** Upstream capacity (docs/protection.md: Upstream capacity). */
  upstream: UpstreamCapacity;
  /** Each upstream, in config order: `'host:port'` or `'unix:/path'`, this route's open connections on it, and the CPU use of its `pid`/`tid` at the last sample (‰ of one core; null when not sampled). */
  upstreams: { upstream: string; activeConnections: number; cpuPermille: number | null }[];
}

/** `routeMetrics[].upstream`: what the route's upstream capacity measured. */
export interface UpstreamCapacity {
  /** `concurrency.mode`. */
  mode: 'adaptive' | 'fixed' | 'off';
  /** Requests (opaque routes: connections) in flight to the upstreams. */
  inFlight: number;
  /** Of which of known-good (priority) clients. */
  inFlightPriority: number;
  /** The limit now (null with mode 'off'). */
  limit: number | null;
  /** The part of the limit other clients may use (null with mode 'off'). */
  otherLimit: number | null;
  /** Mean response-head latency of the last measured 100 ms window, ms (0 before any). */
  latencyMs: number;
  /**
   * The proxy's own run-queue delay in that window, ms: the part of `latencyMs` that is Rampart's
   * load, not the upstream's (the limiter compares `latencyMs − proxyDelayMs`, at least half of
   * `latencyMs`, with `baselineMs`). Measured only while some route of the proxy is `'adaptive'`:
   * 0 on every route otherwise.
   */
  proxyDelayMs: number;
  /** No-load latency baseline, ms (0 before any). */
  baselineMs: number;
  /**
   * The route is overloaded: within the last 2 s a request was refused for lack of capacity, or one
   * started waiting behind more waiters than the limit while the latency was up (new connections
   * of clients that are not known-good are refused at accept while this holds).
   */
  overloaded: boolean;
  /** Requests refused for lack of capacity, since start. */
  refused: number;
  /** Of which of known-good (priority) clients. */
  refusedPriority: number;
  /** Requests waiting for room now (`queueTimeoutMs`, `maxQueue`). */
  queued: number;
  /** Requests that waited for room, since start. */
  waited: number;
  /** Of those, refused when `queueTimeoutMs` passed, since start (also in `refused`). */
  queueTimeouts: number;
  /** Responses whose head was seen (latency samples), since start. */
  answered: number;
  /** Upstream connect failures, since start. */
  connectFailures: number;
  /** Mean upstream connect time, ms (0 before any). */
  connectMs: number;
}

/** One problem found in the input: the field's path and what is wrong with it. */
export interface ConfigErrorEntry {
  /** Path of the offending field, e.g. 'protection[1].protection.penaltyBox.durationMs' or 'listeners[0].port'. */
  path: string;
  /** What is wrong, quoting the value and the accepted range, e.g. 'must be a finite number > 0, got NaN'. */
  message: string;
}

/**
 * Exported as `ConfigError` (`const { ConfigError } = require('rampart')`). Thrown by the
 * constructor, `updateConfig`, `blockIp`, `unblockIp` and `blockedIps` for invalid input (the
 * promises of `stop` and `attachXdp` reject with it for invalid options); when it is thrown nothing
 * was applied (no route, protection or XDP map changed).
 *
 * ```ts
 * try { proxy.updateConfig(u); } catch (e) {
 *   if (e instanceof ConfigError) for (const { path, message } of e.errors) console.error(`${path}: ${message}`);
 *   else throw e;
 * }
 * ```
 */
export class ConfigError extends Error {
  readonly name: 'ConfigError';
  /** Always 'ERR_RAMPART_CONFIG'. */
  readonly code: 'ERR_RAMPART_CONFIG';
  /** Every problem found (not just the first), each with the path of its field. */
  readonly errors: ConfigErrorEntry[];
  /** `message` lists the first 20 problems as 'path: message; ...'. */
  constructor(errors: ConfigErrorEntry[]);
}

/**
 * Deepest nesting of arrays and objects accepted in any value passed to the proxy (a config, an
 * update, opts, a route), the value itself being level 1: 64. A deeper value (or a cyclic one) is
 * a ConfigError whose path names the first value past it, e.g.
 * `routes[0].upstreams[0].x[0]...[0]: nested deeper than 64 levels`.
 */
export const MAX_CONFIG_DEPTH: number;

/** The events a RampartProxy emits, with their listener arguments. */
export interface RampartProxyEvents {
  /** A connection was refused (or, in observe mode, would have been). */
  blocked: [event: BlockedEvent];
  /** Each second in which 'blocked' events were dropped by `blockedEvents.maxPerSecond`. */
  blockedSummary: [summary: BlockedSummary];
  /** A runtime failure (upstream_connect_failed, handshake_failed, ...); emitted only when someone listens. */
  error: [error: ErrorEvent];
  /** A connection of a suspended route is held: call resolveConnection(id, route | null). */
  suspended: [event: SuspendedEvent];
  /** A route's upstream capacity became overloaded or recovered. */
  overload: [event: OverloadEvent];
  /** A ban started, was extended or escalated, expired or was lifted. */
  ban: [event: BanEvent];
  /** After each successful start(). */
  ready: [];
  /** Once per stop() of a running proxy. */
  close: [];
}

/** A listener for event `K` of RampartProxy. */
export type RampartProxyListener<K extends keyof RampartProxyEvents> = (...args: RampartProxyEvents[K]) => void;

export class RampartProxy extends EventEmitter {
  /** Validates everything; throws ConfigError naming every offending field. */
  constructor(config: ProxyConfig);
  /** Binds every listener; rejects with the OS error (code 'EADDRINUSE', ...), leaving nothing bound. */
  start(): Promise<void>;
  /**
   * Stops accepting; after drainMs (ms, a finite number >= 0, default 0) closes the rest; resolves when
   * every socket is closed. `stop(5000)` is `stop({ drainMs: 5000 })` (Symphony's stop(timeoutMs)).
   */
  stop(opts?: { drainMs?: number } | number): Promise<void>;
  /** All-or-nothing; `protection: null` removes a listener's protection. Throws ConfigError. */
  updateConfig(u: {
    routes?: RouteConfig[];
    protection?: { port: number; protection: ProtectionConfig | null }[];
  }): void;
  /** Who is refused now, as CIDR/IP strings: union over listeners (or one port), sorted, deduplicated. */
  blockedIps(opts?: { port?: number; detail?: false }): BlockedIps;
  /** The same with `{ ip, port, reason, remainingMs? }` per entry. */
  blockedIps(opts: { port?: number; detail: true }): BlockedIpsDetail;
  /** `detail` known only at run time: either shape. */
  blockedIps(opts?: { port?: number; detail?: boolean }): BlockedIps | BlockedIpsDetail;
  /** Blocks a CIDR or bare IP; ttlMs omitted = until unblocked; port omitted = every listener. */
  blockIp(cidr: string, opts?: { ttlMs?: number; reason?: string; port?: number }): void;
  /**
   * Why is `ip` refused (or not)? Its state on every listener and the verdict its next connection
   * would get there, plus the kernel's bans covering it. Throws ConfigError (path `ip`) for
   * anything but one IPv4 or IPv6 address.
   */
  explain(ip: string): Explanation;
  /**
   * Every live blockIp entry exactly as held (sorted by network, then port), e.g. to re-apply
   * them to another proxy: `proxy.blockIp(b.cidr, { ttlMs: b.remainingMs, reason: b.reason,
   * port: b.port ?? undefined })`.
   */
  dynamicBlocks(): DynamicBlock[];
  /** Removes a blockIp entry; true when one was removed. */
  unblockIp(cidr: string, opts?: { port?: number }): boolean;
  /**
   * Decides for a suspended connection: `route` serves it as if that route had matched, `null`
   * closes it (`suspend_rejected`). Never throws for the route's content (it is usually called in
   * an async 'suspended' listener): a route that is not valid closes the connection, which emits
   * `'error'` `resolve_route_invalid` with each `route.*` problem in `errors`. True when a held connection
   * took the decision; false (a no-op, nothing validated) when `id` is unknown, expired or
   * already resolved.
   */
  resolveConnection(id: string, route: ResolveRoute | null): boolean;
  /**
   * The problems resolveConnection would find in `route` without a held connection: every field
   * and the route's own rules, each `{ path, message }` with its path under `route`; `[]` when
   * there are none (also for `null`). Not checked: whether a listener has the `defaultCert` that
   * a terminating route without `cert` needs (that depends on the connection's listener).
   */
  checkResolveRoute(route: ResolveRoute | null): ConfigErrorEntry[];
  metrics(): Metrics;
  /**
   * Prometheus text exposition format 0.0.4 of `metrics()`: every series, its labels and the
   * `metrics()` field it shows are listed in docs/operating.md (Prometheus series).
   */
  prometheus(): string;
  /** Loads the XDP program on an interface: 'auto' tries native then generic. */
  attachXdp(opts: { interface: string; mode?: 'auto' | 'native' | 'generic' }): Promise<XdpStatus>;
  detachXdp(): Promise<void>;
  xdpStatus(): XdpStatus;

  // Each listener method is typed per event (see RampartProxyEvents).
  on<K extends keyof RampartProxyEvents>(event: K, listener: RampartProxyListener<K>): this;
  once<K extends keyof RampartProxyEvents>(event: K, listener: RampartProxyListener<K>): this;
  addListener<K extends keyof RampartProxyEvents>(event: K, listener: RampartProxyListener<K>): this;
  prependListener<K extends keyof RampartProxyEvents>(event: K, listener: RampartProxyListener<K>): this;
  prependOnceListener<K extends keyof RampartProxyEvents>(event: K, listener: RampartProxyListener<K>): this;
  off<K extends keyof RampartProxyEvents>(event: K, listener: RampartProxyListener<K>): this;
  removeListener<K extends keyof RampartProxyEvents>(event: K, listener: RampartProxyListener<K>): this;
  on(event: 'blocked', listener: (e: BlockedEvent) => void): this;
  on(event: 'blockedSummary', listener: (s: BlockedSummary) => void): this;
  on(event: 'error', listener: (e: ErrorEvent) => void): this;
  on(event: 'defense', listener: (e: DefenseEvent) => void): this;
  on(event: 'overload', listener: (e: OverloadEvent) => void): this;
  on(event: 'ban', listener: (e: BanEvent) => void): this;
  on(event: 'suspended', listener: (e: SuspendedEvent) => void): this;
  on(event: 'ready' | 'close', listener: () => void): this;
}

/** A self-signed ECDSA P-256 certificate for the given names: [certPem, keyPem]. */
export function generateSelfSignedCert(hosts: string[]): [string, string];

/** Fingerprints of a raw ClientHello (TLS records as sent); null when not a complete hello. */
export function fingerprintClientHello(hello: Buffer): {
  sni: string | null;
  alpn: string[];
  ja3: string;
  ja3String: string;
  ja4: string;
  ja4R: string;
} | null;

/** `SymphonyProxy#metrics()` breakdown entry: one reason and its count. */
export interface SymphonyLabeledCount {
  /** Symphony's reason name ('upstream_connect', 'tls_handshake', ...; docs/symphony.md lists the mapping). */
  reason: string;
  count: number;
}

/** `SymphonyProxy#metrics().listeners[i]`, in config order. */
export interface SymphonyListenerMetrics {
  /** 'host:port' of the listener. */
  address: string;
  /** The listener's `mode` ('tls' when not set). */
  mode: 'tls' | 'http';
  activeConnections: number;
  accepted: number;
  blocked: number;
  errors: number;
  bytesReceived: number;
  bytesSent: number;
  /** Connections of this listener with one direction closed and the other open (0 until the engine reports the gauge). */
  halfClosedConnections: number;
  /** Every block reason, zeros included: Symphony's nine in its order, then Rampart's others. */
  blockedByReason: SymphonyLabeledCount[];
  /** Every error reason, zeros included: Symphony's in its order, then Rampart's others; sums to `errors`. */
  errorsByReason: SymphonyLabeledCount[];
}

/** `SymphonyProxy#metrics().routeMetrics[i]`: one route of the live table. */
export interface SymphonyRouteMetrics {
  /** The route's `sni` ('' = default route). */
  route: string;
  /** Present when the route set `metricsGroup`. */
  metricsGroup?: string;
  activeConnections: number;
  connections: number;
  errors: number;
  bytesReceived: number;
  bytesSent: number;
  /** Only the non-zero reasons, never the pre-route ones (`no_route`, `http_header`). */
  errorsByReason: SymphonyLabeledCount[];
}

/** `SymphonyProxy#metrics()`: Symphony's `ProxyMetrics`. */
export interface SymphonyMetrics {
  activeConnections: number;
  blockedConnections: number;
  /** Connections held now by suspended routes. */
  pendingSuspended: number;
  /** Suspended connections resolved with a route since start (a route refused as not valid is unresolved). */
  suspendedResolved: number;
  /** Suspended connections rejected (`resolveConnection(id, null)`), given a route that is not valid, or timed out since start. */
  suspendedUnresolved: number;
  /** Connections with one direction closed and the other still open (0 until the engine reports the gauge). */
  halfClosedConnections: number;
  /** Routes in the live table, the default route included. */
  routes: number;
  /** Routes that failed to build (route isolation): left out of the table, or serving their last good certificate. Which and why: `rampartMetrics().routeFailures`. */
  failingRoutes: number;
  listeners: SymphonyListenerMetrics[];
  routeMetrics: SymphonyRouteMetrics[];
}

/** `SymphonyProxy`'s `'blocked'` payload (Symphony's). */
export interface SymphonyBlockedEvent {
  ip: string;
  reason: BlockReason;
  /** 'host:port' of the listener. */
  listener: string;
  /** 32-hex MD5, '' when the ClientHello was not read. */
  ja3: string;
  /** JA4, '' when the ClientHello was not read. */
  ja4: string;
}

/** `SymphonyProxy`'s `'connectionError'` payload: a per-connection failure (also counted in metrics()). */
export interface SymphonyConnectionError {
  /** Symphony's reason name ('upstream_connect', ...). */
  reason: string;
  message: string;
  ip: string | null;
  listener: string | null;
}

/** Events of `SymphonyProxy`. */
export interface SymphonyProxyEvents {
  blocked: [event: SymphonyBlockedEvent];
  suspended: [event: SuspendedEvent];
  /**
   * `err.code`: `route_failed` (a route left out, or serving its last good certificate: `route`,
   * `index`, `errors`, `lastGoodCert`), `resolve_route_invalid` (a resolveConnection route that
   * is not valid; the connection was closed: `errors` names each `route.*` problem; both are
   * ConfigErrors, in Symphony's words), `invalid_connection_id` (resolveConnection was given a
   * string that is not a connection id), `upstream_protocol_mismatch`, or a proxy-wide failure
   * (`xdp_sync_failed`, `cluster_unavailable`, `cluster_message_rejected`).
   */
  error: [
    err: Error & { code?: string; errors?: ConfigErrorEntry[]; route?: string | null; index?: number; lastGoodCert?: boolean },
    ctx: { listener?: string },
  ];
  connectionError: [event: SymphonyConnectionError];
  ready: [];
  close: [];
}

/**
 * Symphony's class (HarperFast/symphony `SymphonyProxy`) on Rampart's engine: Symphony's config,
 * defaults, `metrics()` shape, reason names, events and `stop(ms)` (docs/symphony.md). The
 * RampartProxy methods it does not redefine (explain, blockIp, prometheus, ...) work as there.
 */
export class SymphonyProxy extends EventEmitter {
  /**
   * Throws ConfigError; Symphony's route-identity limits carry Symphony's wording. Copy-buffer
   * sizes out of [512, 1048576] are clamped with a warning. Symphony's route rules apply
   * (`symphonyRouteRules` is set): a route failing one of its route-build rules is left out and
   * reported, even when none is left to serve.
   */
  constructor(config: ProxyConfig);
  /** Binds every listener; a second call while running does nothing. */
  start(): Promise<void>;
  /** Stops accepting; closes what is still open after `timeoutMs` (default 100); emits 'close'. */
  stop(timeoutMs?: number): Promise<void>;
  /** All-or-nothing replacement of routes and/or per-port protection; throws ConfigError. */
  updateConfig(u: {
    routes?: RouteConfig[];
    protection?: { port: number; protection: ProtectionConfig | null }[];
  }): void;
  metrics(): SymphonyMetrics;
  /**
   * RampartProxy's metrics() shape. `routeFailures` (and `failingRoutes`) list the routes left
   * out for Symphony's route-build rules (`xForwardedFor` with `http2`, `'h2'` upstreams alone
   * or on a passthrough route) as any route that failed to build.
   */
  rampartMetrics(): Metrics;
  /** Symphony's lists (rateLimited, concurrencyLimited, cidrBlocklist, penaltyBoxed) and Rampart's dynamicBlocklist. */
  blockedIps(opts?: { port?: number; detail?: false }): BlockedIps;
  /**
   * Proxies a held connection with `route`, or closes it (null or left out). A route that is not
   * valid closes the connection and emits 'error' (a ConfigError, `code` 'resolve_route_invalid',
   * `errors` each `route.*` problem in Symphony's words); never a throw. True
   * when a held connection took the decision; false for an unknown, expired or resolved id, for
   * which the route is still checked as checkResolveRoute does (with Symphony's protocol rules),
   * a problem emitted as the same 'error' without ctx.
   * A string that is not a connection id (the decimal form of a 64-bit id) emits 'error'
   * `invalid_connection_id` and returns false.
   */
  resolveConnection(id: string, route?: ResolveRoute | null): boolean;
  /**
   * RampartProxy's: the problems resolveConnection would find in `route` without a held
   * connection (Symphony's protocol rules included), in the engine's words (resolveConnection's
   * 'error' rewords a few as Symphony does); `[]` when there are none (also for `null`).
   */
  checkResolveRoute(route: ResolveRoute | null): ConfigErrorEntry[];
  blockIp(cidr: string, opts?: { ttlMs?: number; reason?: string; port?: number }): void;
  unblockIp(cidr: string, opts?: { port?: number }): boolean;
  explain(ip: string): Explanation;
  /** Prometheus text in Rampart's names (`rampart serve` renders Symphony's names for a symphony-server file). */
  prometheus(): string;
  dynamicBlocks(): DynamicBlock[];
  attachXdp(opts: { interface: string; mode?: 'auto' | 'native' | 'generic' }): Promise<XdpStatus>;
  detachXdp(): Promise<void>;
  xdpStatus(): XdpStatus;

  on<K extends keyof SymphonyProxyEvents>(event: K, listener: (...args: SymphonyProxyEvents[K]) => void): this;
  once<K extends keyof SymphonyProxyEvents>(event: K, listener: (...args: SymphonyProxyEvents[K]) => void): this;
  off<K extends keyof SymphonyProxyEvents>(event: K, listener: (...args: SymphonyProxyEvents[K]) => void): this;
}
