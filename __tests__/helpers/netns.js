'use strict';
// Two network namespaces joined by a veth pair for the XDP specs (root): the proxy's namespace
// holds `proxy`/24 on its end of the pair, the clients' namespace holds every address of
// `clients`/24 on the other. The proxy runs as helpers/xdp-proxy.js inside its namespace with XDP
// attached natively on its veth end; clients run as helpers/netns-client.js in theirs.
const assert = require('node:assert/strict');
const path = require('node:path');
const h = require('.');
const { startXdpProxy } = require('./xdp-child');

const within = (ms) => new Promise((r) => setTimeout(r, ms));

/** `ip ARGS`; throws with its stderr when it fails. */
async function ip(...args) {
  const r = await h.run('ip', args);
  if (r.code !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
}

/**
 * A namespace pair named after this process and `tag` (one letter, so specs never share names):
 * `{ nsProxy, nsClient, vethProxy, vethClient, proxy, setup, client, startProxy }`. Call it at the
 * top level of a spec with node:test's `after`: the namespaces (if made) are removed when the
 * file's tests are done.
 */
function vethPair({ tag, proxy, clients, after }) {
  const id = process.pid % 100000;
  const pair = {
    nsProxy: `rampart-${tag}p${id}`,
    nsClient: `rampart-${tag}c${id}`,
    vethProxy: `r${tag}p${id}`,
    vethClient: `r${tag}c${id}`,
    proxy,
  };
  let ready = null;
  let made = false;

  after(async () => {
    if (!made) return;
    await h.run('ip', ['netns', 'del', pair.nsProxy]);
    await h.run('ip', ['netns', 'del', pair.nsClient]);
  });

  /**
   * Creates the pair once (later calls return the first answer). Resolves `''` when ready, or the
   * reason it cannot be made here (not root, no netns), for `h.skipOrFail`.
   */
  pair.setup = async () => {
    if (ready !== null) return ready;
    if (!h.isRoot) return (ready = 'needs root (network namespaces, XDP)');
    const probe = await h.run('ip', ['netns', 'add', pair.nsProxy]);
    if (probe.code !== 0) return (ready = `cannot create network namespaces: ${probe.stderr}`);
    made = true;
    const { nsProxy: np, nsClient: nc, vethProxy: vp, vethClient: vc } = pair;
    await ip('netns', 'add', nc);
    await ip('link', 'add', vp, 'type', 'veth', 'peer', 'name', vc);
    await ip('link', 'set', vp, 'netns', np);
    await ip('link', 'set', vc, 'netns', nc);
    await ip('-n', np, 'addr', 'add', `${proxy}/24`, 'dev', vp);
    for (const a of clients) await ip('-n', nc, 'addr', 'add', `${a}/24`, 'dev', vc);
    for (const [ns, dev] of [
      [np, vp],
      [nc, vc],
    ]) {
      await ip('-n', ns, 'link', 'set', 'lo', 'up');
      await ip('-n', ns, 'link', 'set', dev, 'up');
    }
    return (ready = '');
  };

  /** netns-client.js `mode` from `src` to the proxy's `port` in the clients' namespace: its stdout. */
  pair.client = async (mode, src, port, timeoutMs = 1500, ...extra) => {
    const script = path.join(__dirname, 'netns-client.js');
    const args = ['netns', 'exec', pair.nsClient, process.execPath, script, mode, proxy, String(port), src, String(timeoutMs), ...extra.map(String)];
    const r = await h.run('ip', args, { timeoutMs: 120000 });
    return r.stdout.toString();
  };

  /**
   * Starts xdp-proxy.js with `opts` in the proxy's namespace and attaches XDP natively on its veth
   * end (asserted); stopped (detached, exited, killed) after test `t`. `{ p, attached }`.
   */
  pair.startProxy = async (t, opts) => {
    const p = startXdpProxy(pair.nsProxy, opts);
    t.after(async () => {
      await Promise.race([p.call('detach'), within(3000)]);
      await Promise.race([p.call('exit'), within(3000)]);
      p.child.kill('SIGKILL');
    });
    const r = await p.ready;
    assert.equal(r.fatal, undefined, r.fatal);
    const attached = await p.call('attach', { interface: pair.vethProxy, mode: 'native' });
    assert.equal(attached.attached, true);
    assert.equal(attached.mode, 'native');
    assert.equal(attached.interface, pair.vethProxy);
    return { p, attached };
  };
  return pair;
}

module.exports = { vethPair, ip };
