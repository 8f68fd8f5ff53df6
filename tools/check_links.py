#!/usr/bin/env python3
"""Relative links of the documentation: README.md and docs/**/*.md.

Owns: the check that every relative Markdown link `](path)` or
`](path#anchor)` (and `](#anchor)` within the page) names a file that exists
and, for an anchor into a Markdown file, a heading whose GitHub slug is that
anchor.  It reads only; it touches no file.  External links (http:, https:,
mailto:) are not checked: the tests run without a network.

Usage: tools/check_links.py [ROOT]   (default: the checkout holding this file)
Exit 0 when every link resolves, 1 with one line per broken link
(FILE:LINE: link: why).
"""
import os
import re
import sys

LINK = re.compile(r'\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+"[^"]*")?\)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')


def strip_code(line):
    """A line without its inline code spans (links inside them are text)."""
    return re.sub(r'(`+)(?:(?!\1).)+\1', '', line)


def slug(text):
    """GitHub's anchor for a heading: lower case, markup and punctuation
    dropped (letters, digits, '_', '-' and spaces kept), spaces -> '-'."""
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)   # [t](u) -> t
    text = re.sub(r'<[^>]+>', '', text)                        # html tags
    text = text.strip().lower()
    text = ''.join(c for c in text if c.isalnum() or c in '_- ')
    return text.replace(' ', '-')


def anchors(path, cache={}):
    """The anchors of a Markdown file (duplicates numbered as GitHub does)."""
    if path in cache:
        return cache[path]
    seen, out, fence = {}, set(), None
    with open(path, encoding='utf-8') as f:
        for line in f:
            m = re.match(r'^\s*(`{3,}|~{3,})', line)
            if m:
                if fence is None:
                    fence = m.group(1)[0]
                elif m.group(1)[0] == fence:
                    fence = None
                continue
            if fence:
                continue
            h = HEADING.match(line)
            if not h:
                continue
            s = slug(h.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f'{s}-{n}')
            # explicit <a name="..."> / id="..." anchors
        for a in re.findall(r'<a\s+(?:name|id)="([^"]+)"', open(path, encoding='utf-8').read()):
            out.add(a)
    cache[path] = out
    return out


def links(path):
    """(line number, target) of every link outside code blocks and spans."""
    fence = None
    with open(path, encoding='utf-8') as f:
        for no, line in enumerate(f, 1):
            m = re.match(r'^\s*(`{3,}|~{3,})', line)
            if m:
                if fence is None:
                    fence = m.group(1)[0]
                elif m.group(1)[0] == fence:
                    fence = None
                continue
            if fence:
                continue
            for t in LINK.findall(strip_code(line)):
                yield no, t


def check(root):
    pages = [os.path.join(root, 'README.md')]
    for d, _, files in os.walk(os.path.join(root, 'docs')):
        pages += [os.path.join(d, f) for f in sorted(files) if f.endswith('.md')]
    bad = []
    for page in sorted(pages):
        if not os.path.exists(page):
            bad.append(f'{os.path.relpath(page, root)}: missing')
            continue
        for no, t in links(page):
            if re.match(r'^[a-z][a-z0-9+.-]*:', t, re.I):
                continue                         # http:, https:, mailto:
            where = f'{os.path.relpath(page, root)}:{no}: {t}'
            file, _, anchor = t.partition('#')
            target = os.path.normpath(os.path.join(os.path.dirname(page), file)) if file else page
            if not os.path.exists(target):
                bad.append(f'{where}: no such file')
                continue
            if not os.path.realpath(target).startswith(os.path.realpath(root) + os.sep):
                bad.append(f'{where}: outside the checkout')
                continue
            if anchor and target.endswith('.md') and anchor not in anchors(target):
                bad.append(f'{where}: no heading with this anchor in {os.path.relpath(target, root)}')
    return pages, bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pages, bad = check(root)
    for b in bad:
        print(b)
    print(f'check_links: {len(pages)} pages, {len(bad)} broken link(s)', file=sys.stderr)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
