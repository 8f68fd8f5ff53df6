#!/usr/bin/python3
"""check_links.py -- every relative link of README.md and docs/**/*.md leads
somewhere: the file exists, and a #anchor names a heading of that file (by
GitHub's rule: lower case, punctuation dropped, spaces to hyphens, -1, -2 for
repeats).  Links inside code (fenced blocks, `inline`) are not links.

    /usr/bin/python3 tools/check_links.py [--max-readme-lines N]

Exit 0 when every link holds (and README.md is within N lines when given),
1 with one line per broken link otherwise.  Standard library only.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)')


def slug(text):
    text = re.sub(r'`', '', text.strip().lower())
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def strip_code(text):
    """The text with fenced blocks and inline code blanked (line count kept)."""
    out, fence = [], False
    for line in text.split('\n'):
        if line.lstrip().startswith('```'):
            fence = not fence
            out.append('')
            continue
        out.append('' if fence else re.sub(r'`[^`]*`', '', line))
    return out


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, found = {}, set()
        with open(path, encoding='utf-8') as f:
            lines = f.read().split('\n')
        fence = False
        for line in lines:
            if line.lstrip().startswith('```'):
                fence = not fence
                continue
            m = None if fence else re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
            if m:
                s = slug(m.group(1))
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else '%s-%d' % (s, n))
        _anchors[path] = found
    return _anchors[path]


def pages():
    yield os.path.join(ROOT, 'README.md')
    for d, _, files in os.walk(os.path.join(ROOT, 'docs')):
        for f in sorted(files):
            if f.endswith('.md'):
                yield os.path.join(d, f)


def main():
    limit = None
    if len(sys.argv) == 3 and sys.argv[1] == '--max-readme-lines':
        limit = int(sys.argv[2])
    bad = 0
    checked = 0
    for page in pages():
        with open(page, encoding='utf-8') as f:
            lines = strip_code(f.read())
        rel = os.path.relpath(page, ROOT)
        for no, line in enumerate(lines, 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r'^[a-z]+:', target):
                    continue   # http:, https:, mailto:
                checked += 1
                path, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                if not os.path.exists(dest):
                    print('%s:%d: %s: no such file' % (rel, no, target))
                    bad += 1
                    continue
                if anchor and (os.path.isdir(dest) or not dest.endswith('.md') or
                               anchor not in anchors(dest)):
                    print('%s:%d: %s: no heading #%s in %s' % (rel, no, target, anchor,
                                                                os.path.relpath(dest, ROOT)))
                    bad += 1
    if limit is not None:
        with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
            n = f.read().count('\n')
        if n > limit:
            print('README.md: %d lines, more than %d (reference text belongs in docs/)' % (n, limit))
            bad += 1
    print('check_links: %d links checked, %d problems' % (checked, bad))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
