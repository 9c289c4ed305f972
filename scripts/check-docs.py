#!/usr/bin/env python3
"""Checks the user guide (docs/, an mdBook) and the README: every relative link and anchor
resolves, every mdBook include and its anchor exists, and every chapter is in SUMMARY.md.
Run by scripts/docs.sh after `mdbook build docs`."""
import re, pathlib, sys
root = pathlib.Path(__file__).resolve().parent.parent
files = [root/'README.md'] + sorted((root/'docs').glob('*.md'))
def strip_code(text):
    out, fence = [], False
    for line in text.split('\n'):
        if line.lstrip().startswith('```'):
            fence = not fence; out.append(''); continue
        out.append('' if fence else re.sub(r'`[^`]*`', '', line))
    return '\n'.join(out)
def slug(h):
    h = h.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')
def anchors(path):
    text = path.read_text()
    res, fence = set(), False
    for line in text.split('\n'):
        if line.lstrip().startswith('```'): fence = not fence; continue
        m = None if fence else re.match(r'^(#{1,6})\s+(.*)$', line)
        if m: res.add(slug(m.group(2)))
    return res
bad, n = [], 0
for f in files:
    text = f.read_text()
    for m in re.finditer(r'\]\(([^)\s]+)\)', strip_code(text)):
        t = m.group(1)
        if re.match(r'^[a-z]+:', t): continue
        n += 1
        path, _, anchor = t.partition('#')
        target = (f.parent / path).resolve() if path else f
        if not target.exists():
            bad.append(f'{f.relative_to(root)}: {t}: no such file'); continue
        if anchor and target.suffix == '.md' and anchor not in anchors(target):
            bad.append(f'{f.relative_to(root)}: {t}: no such anchor')
    for m in re.finditer(r'\{\{#include ([^:}]+)(?::([\w-]+))?\}\}', text):
        n += 1
        target = (f.parent / m.group(1)).resolve()
        if not target.exists():
            bad.append(f'{f.relative_to(root)}: include {m.group(1)}: no such file'); continue
        if m.group(2) and f'ANCHOR: {m.group(2)}' not in target.read_text():
            bad.append(f'{f.relative_to(root)}: include anchor {m.group(2)} missing')
# every chapter in SUMMARY, every SUMMARY entry exists
summary = (root/'docs/SUMMARY.md').read_text()
listed = set(re.findall(r'\]\(([^)]+\.md)\)', summary))
for p in (root/'docs').glob('*.md'):
    if p.name != 'SUMMARY.md' and p.name not in listed:
        bad.append(f'docs/{p.name}: not in SUMMARY.md')
print(f'{n} relative links/includes checked in {len(files)} files')
print('\n'.join(bad) if bad else 'all resolve')
sys.exit(1 if bad else 0)
