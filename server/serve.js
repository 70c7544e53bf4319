'use strict';
/**
 * `rampart serve --config FILE`: runs the proxy of a config file until SIGTERM/SIGINT.
 *
 * Start: load and validate the file (any error: logged, exit 1), start the proxy (a port that
 * cannot be bound: exit 1), attach XDP when the file has `xdp` (a failure is logged as an
 * `error` event `xdp_attach_failed` and the server runs without it: the userspace engine enforces
 * the same policy; every reload tries again), listen for the admin API (a failure: exit 1), watch
 * the files, log `start`.
 * Reload: SIGHUP, `POST /reload`, or a change of the config file or any file it names (see
 * watch.js and supervisor.js).
 * Stop: SIGTERM or SIGINT stops accepting, lets connections run for `drainMs`, closes the rest,
 * logs `stop` and exits 0. A second signal while draining ends the process at once, by that
 * signal (the default action; systemd counts SIGTERM/SIGINT as a clean exit). When no proxy can
 * run any more (a handover and its rollback both failed to bind), the server stops and exits 1,
 * so that systemd's Restart=on-failure starts it again.
 */
const fs = require('node:fs');
const { createLogger } = require('./log');
const { loadConfigFile, formatErrors } = require('./config-file');
const { Supervisor } = require('./supervisor');
const { startAdmin } = require('./admin');
const { DirWatcher } = require('./watch');

const { version } = JSON.parse(fs.readFileSync(require.resolve('../package.json'), 'utf8'));

/** Resolves the exit status once the server has stopped (or failed to start). */
async function serve({ configPath, logFormat = 'json' }) {
  const log = createLogger({ format: logFormat });
  let supervisor = null;
  let admin = null;
  let watcher = null;
  let stopSignal = null;
  let wakeStop;
  const stopRequested = new Promise((r) => (wakeStop = r));
  let hupBeforeStart = false;

  // Every reload goes through here: its outcome is logged by the supervisor, and nothing it can
  // throw (or reject with) leaves this promise chain, so no reload stops the server.
  const reloadFrom = (trigger) =>
    supervisor
      .reload(trigger)
      .then(() => watcher && watcher.set(supervisor.watchedFiles()))
      .catch((e) => log.event('error', { code: 'reload_failed', message: e && e.message ? e.message : String(e), trigger }));
  const onHup = () => {
    if (!supervisor || !supervisor.current) {
      hupBeforeStart = true;
      return;
    }
    reloadFrom('sighup');
  };
  const onStop = (signal) => {
    if (stopSignal) {
      // process.exit() would wait for the drain (the addon's stop runs on the libuv pool, which
      // Node joins at exit): die by the signal itself, as an unhandled SIGTERM/SIGINT would.
      log.event('stop', { signal, forced: true, message: `second ${signal} while draining: exiting now` });
      cleanupSignals();
      process.kill(process.pid, signal);
      return;
    }
    stopSignal = signal;
    wakeStop(signal);
  };
  const onTerm = () => onStop('SIGTERM');
  const onInt = () => onStop('SIGINT');
  // Every promise of the server is handled where it is made (reloads below, admin handlers, the
  // supervisor's queue and drains). No `unhandledRejection` handler keeps serving on purpose: one
  // would be a bug in an unknown state, so Node turns it into an uncaught exception, logged here
  // with its stack, and the exit (1) lets systemd's Restart=on-failure start a clean process.
  process.on('uncaughtException', (e) => {
    log.event('error', { code: 'uncaught', message: e && e.stack ? e.stack : String(e) });
    process.exit(1);
  });
  process.on('SIGHUP', onHup);
  process.on('SIGTERM', onTerm);
  process.on('SIGINT', onInt);
  const cleanupSignals = () => {
    process.off('SIGHUP', onHup);
    process.off('SIGTERM', onTerm);
    process.off('SIGINT', onInt);
  };

  const loaded = loadConfigFile(configPath);
  if (loaded.errors.length) {
    log.event('error', { code: 'config_invalid', message: `${loaded.path}: invalid config; not starting`, errors: loaded.errors });
    process.stderr.write(
      `rampart: ${loaded.path}: invalid config\n${formatErrors(loaded.errors)
        .map((l) => `  ${l}\n`)
        .join('')}`
    );
    cleanupSignals();
    return 1;
  }
  let exitCode = 0;
  supervisor = new Supervisor({
    log,
    configPath: loaded.path,
    onFatal: () => {
      exitCode = 1;
      if (!stopSignal) {
        stopSignal = 'fatal';
        wakeStop('fatal');
      }
    },
  });
  let started;
  try {
    started = await supervisor.start(loaded);
  } catch (e) {
    log.event('error', { code: 'start_failed', message: e.message, cause: e.code });
    process.stderr.write(`rampart: cannot start: ${e.message}\n`);
    cleanupSignals();
    return 1;
  }
  if (loaded.admin) {
    try {
      admin = await startAdmin({ admin: loaded.admin, supervisor, log, version });
    } catch (e) {
      log.event('error', { code: 'admin_listen_failed', message: e.message, cause: e.code });
      process.stderr.write(`rampart: admin API: ${e.message}\n`);
      await supervisor.stop(0);
      cleanupSignals();
      return 1;
    }
  }
  watcher = new DirWatcher({
    onChange: () => {
      if (stopSignal || !supervisor.filesChanged()) return;
      reloadFrom('file');
    },
    onError: (dir, err) =>
      log.event('error', { code: 'watch_failed', message: `cannot watch ${dir}: ${err.message}; reload with SIGHUP or POST /reload`, dir }),
  });
  watcher.set(supervisor.watchedFiles());
  // A change between the load and the first watch would otherwise wait for the next event.
  if (supervisor.filesChanged()) reloadFrom('file');
  log.event('start', {
    pid: process.pid,
    version,
    config: loaded.path,
    ports: started.ports,
    admin: admin ? admin.addresses : [],
    xdp: started.xdp,
    drainMs: loaded.drainMs,
  });
  if (hupBeforeStart) onHup();

  const signal = await stopRequested;
  const t0 = Date.now();
  const drainMs = supervisor.drainMs();
  watcher.close();
  if (admin) await admin.close();
  await supervisor.stop(drainMs);
  log.event('stop', { signal, drainMs, durationMs: Date.now() - t0 });
  cleanupSignals();
  return exitCode;
}

module.exports = { serve, version };
