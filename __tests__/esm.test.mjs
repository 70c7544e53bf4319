// ESM import works as well as require().
import test from 'node:test';
import assert from 'node:assert/strict';
import { RampartProxy, ConfigError, generateSelfSignedCert, fingerprintClientHello } from '../index.mjs';
import rampart from '../index.mjs';

test('ESM named and default exports', () => {
  assert.equal(typeof RampartProxy, 'function');
  assert.equal(typeof generateSelfSignedCert, 'function');
  assert.equal(typeof fingerprintClientHello, 'function');
  assert.equal(rampart.RampartProxy, RampartProxy);
  assert.throws(() => new RampartProxy({ listeners: [], routes: [] }), ConfigError);
});
