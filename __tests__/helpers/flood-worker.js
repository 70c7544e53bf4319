'use strict';
// Runs `tlsGetFlood(workerData)` on its own thread and posts its result: the flood's TLS work then
// never delays the event loop of the spec that measures a probe beside it.
const { parentPort, workerData } = require('node:worker_threads');
const { tlsGetFlood } = require('./flood');

tlsGetFlood(workerData).then(
  (r) => parentPort.postMessage({ ok: r }),
  (e) => parentPort.postMessage({ error: String((e && e.stack) || e) })
);
