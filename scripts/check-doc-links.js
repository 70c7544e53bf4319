#!/usr/bin/env node
'use strict';
// Checks the relative links of the docs: every `[text](target)` and `![alt](target)` in README.md,
// BENCHMARKS.md and docs/*.md whose target is not a URL must name a file or directory of the
// repository, and a `#anchor` (on its own or after a .md file) must be a heading of that page,
// spelled as GitHub spells heading anchors (lower case, punctuation dropped, spaces to `-`, a
// repeated heading gets `-1`, `-2`, ...). Links inside code blocks and inline code are not links.
//
// Usage: node scripts/check-doc-links.js   (prints each broken link as file:line: link: reason;
// exit 1 when there is one). The spec __tests__/docs.links.test.js runs it through checkDocLinks().

const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.join(__dirname, '..');

/** The Markdown files checked: README.md, BENCHMARKS.md and docs/*.md, as paths from the root. */
function docFiles(root = ROOT) {
  const docs = fs
    .readdirSync(path.join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => path.join('docs', f));
  return ['README.md', 'BENCHMARKS.md', ...docs].filter((f) => fs.existsSync(path.join(root, f)));
}

/** The lines of a Markdown text outside fenced code blocks, as [lineNumber, text] pairs. */
function proseLines(text) {
  const out = [];
  let fence = null;
  text.split('\n').forEach((line, i) => {
    const m = /^\s*(`{3,}|~{3,})/.exec(line);
    if (m) {
      if (fence === null) fence = m[1][0];
      else if (m[1][0] === fence) fence = null;
      return;
    }
    if (fence === null) out.push([i + 1, line]);
  });
  return out;
}

/** GitHub's anchor for a heading text: lower case, punctuation dropped, each space a `-`. */
function slug(heading) {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a Markdown text defines through its headings (repeats numbered as GitHub does). */
function anchorsOf(text) {
  const seen = new Map();
  const anchors = new Set();
  for (const [, line] of proseLines(text)) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]);
    const n = seen.get(base);
    const id = n === undefined ? base : `${base}-${n + 1}`;
    seen.set(base, n === undefined ? 0 : n + 1);
    anchors.add(id);
  }
  return anchors;
}

/** The link targets of a line, inline code removed: [{ target }] for `](target)`. */
function linksOf(line) {
  const prose = line.replace(/`[^`]*`/g, '');
  const out = [];
  const re = /\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;
  let m;
  while ((m = re.exec(prose)) !== null) out.push(m[1]);
  return out;
}

/**
 * Checks every relative link of the docs. Returns { files, links, problems: [{ file, line, link,
 * message }] }: `files` the pages read, `links` how many relative links were checked.
 */
function checkDocLinks(root = ROOT) {
  const files = docFiles(root);
  const anchorCache = new Map();
  const anchors = (abs) => {
    if (!anchorCache.has(abs)) anchorCache.set(abs, anchorsOf(fs.readFileSync(abs, 'utf8')));
    return anchorCache.get(abs);
  };
  const problems = [];
  let links = 0;
  for (const file of files) {
    const abs = path.join(root, file);
    const text = fs.readFileSync(abs, 'utf8');
    for (const [lineNo, line] of proseLines(text)) {
      for (const link of linksOf(line)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // http:, https:, mailto:, ...
        links++;
        const hash = link.indexOf('#');
        const target = hash >= 0 ? link.slice(0, hash) : link;
        const anchor = hash >= 0 ? decodeURIComponent(link.slice(hash + 1)) : null;
        const report = (message) => problems.push({ file, line: lineNo, link, message });
        let targetAbs = abs;
        if (target !== '') {
          targetAbs = path.resolve(path.dirname(abs), decodeURIComponent(target));
          if (!targetAbs.startsWith(root + path.sep) && targetAbs !== root) {
            report('points outside the repository');
            continue;
          }
          if (!fs.existsSync(targetAbs)) {
            report(`no such file: ${path.relative(root, targetAbs)}`);
            continue;
          }
        }
        if (anchor !== null) {
          if (!targetAbs.endsWith('.md')) {
            report('an anchor into a file that is not Markdown');
          } else if (!anchors(targetAbs).has(anchor)) {
            report(`no heading with anchor #${anchor} in ${path.relative(root, targetAbs)}`);
          }
        }
      }
    }
  }
  return { files, links, problems };
}

module.exports = { checkDocLinks, anchorsOf, slug, docFiles };

if (require.main === module) {
  const { files, links, problems } = checkDocLinks();
  for (const p of problems) console.log(`${p.file}:${p.line}: ${p.link}: ${p.message}`);
  console.log(`${files.length} files, ${links} relative links, ${problems.length} broken`);
  process.exit(problems.length ? 1 : 0);
}
