'use strict';
// The tables of benches/run.js: the metrics a row reports, the results table (Rampart, Rampart B,
// the peers and the ratios), the protection cost and the floor lines.
const L = require('./lib');

/** Display names of the measured proxies (`rampartB`: `run.js --compare`). */
const NAME = { rampart: 'Rampart', rampartB: 'Rampart B', haproxy: 'HAProxy', nginx: 'nginx' };

/** Bytes of the bulk row's body (the floor lines give its CPU per MiB). */
const BULK_BYTES = 65536;

const METRIC = {
  rps: { label: 'req/s (= conn/s when 1 req/conn)', better: 'higher', fmt: (x) => x.toFixed(0) },
  mbps: { label: 'MiB/s', better: 'higher', fmt: (x) => x.toFixed(1) },
  p99Ms: { label: 'p99 latency ms', better: 'lower', fmt: (x) => x.toFixed(1) },
  p98Ms: { label: 'p98 latency ms', better: 'lower', fmt: (x) => x.toFixed(1) },
  p999Ms: { label: 'p99.9 latency ms', better: 'lower', fmt: (x) => x.toFixed(1) },
  maxMs: { label: 'max latency ms', better: 'lower', fmt: (x) => x.toFixed(1) },
  p50Ms: { label: 'probe p50 latency ms', better: 'lower', fmt: (x) => x.toFixed(1) },
  cpuUsPerReq: { label: 'proxy CPU µs/req', better: 'lower', fmt: (x) => x.toFixed(1) },
  okPct: { label: 'probe success %', better: 'higher', fmt: (x) => x.toFixed(1) },
  floodPerSec: { label: 'flood attempts/s', better: 'info', fmt: (x) => x.toFixed(0) },
  refusedPct: { label: 'flood refused at accept %', better: 'higher', fmt: (x) => x.toFixed(1) },
  cpuPct: { label: 'proxy CPU % (of 1 core)', better: 'lower', fmt: (x) => x.toFixed(0) },
  rssMiB: { label: 'RSS MiB', better: 'lower', fmt: (x) => x.toFixed(1) },
  kibPerConn: { label: 'RSS KiB per idle conn', better: 'lower', fmt: (x) => x.toFixed(1) },
  established: { label: 'connections held', better: 'info', fmt: (x) => x.toFixed(0) },
};

function summarize(xs, fmt) {
  const v = xs.filter((x) => Number.isFinite(x));
  if (!v.length) return { med: NaN, text: 'n/a' };
  const med = L.median(v);
  const text = v.length > 1 ? `${fmt(med)} (${fmt(Math.min(...v))}–${fmt(Math.max(...v))})` : fmt(med);
  return { med, text };
}

/**
 * The results table: Rampart, each peer, Rampart / the better peer; with a "Rampart B" column in
 * `results` (--compare), also that column and Rampart / B.
 */
function table(rows, results, peers) {
  const withB = rows.some((r) => results[r.id] && results[r.id].rampartB && results[r.id].rampartB.length);
  const lines = [
    `| scenario | metric | Rampart | ${withB ? 'Rampart B | ' : ''}${peers.map((k) => `${NAME[k]} | `).join('')}Rampart / better peer | ${withB ? 'Rampart / B | ' : ''}better |`,
    `|---|---|---|${withB ? '---|' : ''}${peers.map(() => '---|').join('')}---|${withB ? '---|' : ''}---|`,
  ];
  for (const row of rows) {
    const res = results[row.id];
    if (!res) continue;
    for (const m of row.metrics) {
      const M = METRIC[m];
      const r = summarize(
        res.rampart.map((x) => x[m]),
        M.fmt
      );
      const ps = peers.map((k) => ({
        k,
        ...summarize(
          (res[k] || []).map((x) => x[m]),
          M.fmt
        ),
      }));
      const cells = ps.map((p) => (row.na && row.na[p.k] ? `n/a (${row.na[p.k]})` : p.text));
      const valid = ps.filter((p) => Number.isFinite(p.med) && p.med !== 0 && !(row.na && row.na[p.k]));
      let ratio = '–';
      if (M.better !== 'info' && valid.length && Number.isFinite(r.med)) {
        const best = valid.reduce((a, b) => ((M.better === 'higher' ? b.med > a.med : b.med < a.med) ? b : a));
        ratio = `${(r.med / best.med).toFixed(2)} (${NAME[best.k]})`;
      }
      let bCells = '';
      if (withB) {
        const b = summarize(
          (res.rampartB || []).map((x) => x[m]),
          M.fmt
        );
        const ab = M.better !== 'info' && Number.isFinite(r.med / b.med) && b.med !== 0 ? (r.med / b.med).toFixed(3) : '–';
        bCells = `${b.text} | `;
        lines.push(`| ${row.title} | ${M.label} | ${r.text} | ${bCells}${cells.map((c) => `${c} | `).join('')}${ratio} | ${ab} | ${M.better} |`);
        continue;
      }
      lines.push(`| ${row.title} | ${M.label} | ${r.text} | ${cells.map((c) => `${c} | `).join('')}${ratio} | ${M.better} |`);
    }
  }
  return lines.join('\n');
}

/**
 * Protection cost per paired row and proxy: the change of the median req/s and of the median
 * proxy CPU per request against the baseline row (positive = protection costs that much).
 */
function protectionCost(rows, results, kinds) {
  const out = [];
  for (const row of rows) {
    if (!row.baseline || !results[row.id] || !results[row.baseline]) continue;
    for (const kind of kinds) {
      if ((row.na && row.na[kind]) || !results[row.id][kind].length) continue;
      const med = (id, m) => L.median(results[id][kind].map((x) => x[m]));
      const rps = (1 - med(row.id, 'rps') / med(row.baseline, 'rps')) * 100;
      const cpu = (med(row.id, 'cpuUsPerReq') / med(row.baseline, 'cpuUsPerReq') - 1) * 100;
      out.push(`| ${row.baseline} → ${row.id} | ${NAME[kind]} | ${rps.toFixed(1)}% | ${cpu.toFixed(1)}% |`);
    }
  }
  return out.length ? ['| rows | proxy | req/s lost | CPU µs/req added |', '|---|---|---|---|', ...out] : [];
}

/** The floor and Rampart's per-connection and per-MiB CPU as multiples of it. */
function floorLines(f, results) {
  const med = (id) => (results[id] ? L.median(results[id].rampart.map((x) => x.cpuUsPerReq)) : NaN);
  const lines = [
    `floor (${f.command}; ${f.suite}, ${f.key}, ${f.kx}, rustls ${f.rustls} with the ${f.provider} provider, one thread, no sockets):`,
    '',
    '| floor | CPU | Rampart | Rampart / floor |',
    '|---|---|---|---|',
  ];
  const x = (a, b) => (Number.isFinite(a / b) ? `${(a / b).toFixed(1)}×` : '–');
  const hs = med('hs-full');
  lines.push(
    `| full TLS 1.3 handshake, server side | ${f.handshake.serverUs.toFixed(1)} µs | ${Number.isFinite(hs) ? `${hs.toFixed(1)} µs/new conn (hs-full)` : '–'} | ${x(hs, f.handshake.serverUs)} |`
  );
  lines.push(`| full TLS 1.3 handshake, client + server | ${f.handshake.totalUs.toFixed(1)} µs | | |`);
  // Bulk row: one 64 KiB body per request; per MiB of response body.
  const bulk = med('bulk');
  const perMiB = bulk / (BULK_BYTES / 2 ** 20);
  lines.push(
    `| memcpy, per MiB | ${f.perMiB.memcpyUs.toFixed(1)} µs | ${Number.isFinite(perMiB) ? `${perMiB.toFixed(0)} µs/MiB (bulk)` : '–'} | ${x(perMiB, f.perMiB.memcpyUs)} |`
  );
  lines.push(`| TLS records (seal), per MiB | ${f.perMiB.sealUs.toFixed(1)} µs | | ${x(perMiB, f.perMiB.sealUs)} |`);
  lines.push(`| memcpy + seal, per MiB | ${(f.perMiB.memcpyUs + f.perMiB.sealUs).toFixed(1)} µs | | ${x(perMiB, f.perMiB.memcpyUs + f.perMiB.sealUs)} |`);
  return lines;
}

module.exports = { NAME, BULK_BYTES, METRIC, summarize, table, protectionCost, floorLines };
