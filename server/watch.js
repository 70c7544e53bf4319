'use strict';
/**
 * Follows files by watching the directories that hold them (inotify via `fs.watch`), so every way
 * a file gets replaced is seen: an edit in place, an editor's or certbot's atomic rename, and a
 * Kubernetes ConfigMap/Secret update (the `..data` symlink swapped to a new timestamped
 * directory: the event names `..data`, never the file). For each file both the directory of the
 * path as given and the directory of its realpath are watched (a symlinked config edited in
 * place is seen too).
 *
 * Events are debounced: `onChange` runs `debounceMs` after the last event of a burst, and at most
 * `maxWaitMs` after its first event (a directory that never stops changing still gets checked).
 * Whether anything relevant changed is for `onChange` to decide (compare file contents): a
 * watched directory may hold unrelated files.
 */
const fs = require('node:fs');
const path = require('node:path');

class DirWatcher {
  /**
   * @param {{ onChange: () => void, onError?: (dir: string, err: Error) => void,
   *           debounceMs?: number, maxWaitMs?: number }} opts
   */
  constructor({ onChange, onError = () => {}, debounceMs = 200, maxWaitMs = 1000 }) {
    this.onChange = onChange;
    this.onError = onError;
    this.debounceMs = debounceMs;
    this.maxWaitMs = maxWaitMs;
    this.watchers = new Map();
    this.failed = new Set();
    this.timer = null;
    this.first = 0;
    this.closed = false;
  }

  /** Directories to watch for `files`. */
  static dirsFor(files) {
    const dirs = new Set();
    for (const f of files) {
      dirs.add(path.dirname(f));
      try {
        dirs.add(path.dirname(fs.realpathSync(f)));
      } catch {
        // missing file: its directory is watched, so its arrival is seen
      }
    }
    return dirs;
  }

  /** Watches exactly the directories holding `files` (call again after each reload). */
  set(files) {
    if (this.closed) return;
    const want = DirWatcher.dirsFor(files);
    for (const [dir, w] of this.watchers) {
      if (!want.has(dir)) {
        w.close();
        this.watchers.delete(dir);
      }
    }
    for (const dir of want) {
      if (this.watchers.has(dir)) continue;
      try {
        const w = fs.watch(dir, { persistent: false }, () => this._poke());
        w.on('error', (err) => {
          // The directory went away (or became unreadable); set() tries again after the next reload.
          w.close();
          this.watchers.delete(dir);
          this.onError(dir, err);
          this._poke();
        });
        this.watchers.set(dir, w);
        this.failed.delete(dir);
      } catch (err) {
        if (!this.failed.has(dir)) this.onError(dir, err);
        this.failed.add(dir);
      }
    }
  }

  _poke() {
    if (this.closed) return;
    const now = Date.now();
    if (this.timer) clearTimeout(this.timer);
    else this.first = now;
    const delay = Math.max(0, Math.min(this.debounceMs, this.first + this.maxWaitMs - now));
    this.timer = setTimeout(() => {
      this.timer = null;
      this.onChange();
    }, delay);
  }

  close() {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }
}

module.exports = { DirWatcher };
