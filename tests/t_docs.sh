#!/usr/bin/env bash
# The documentation (docs/README.md indexes it): every relative link and
# anchor of README.md and docs/**/*.md resolves (tools/check_links.py), and
# README.md stays a front page of at most 500 lines (the reference lives
# in docs/, the measurements in docs/perf/).  The checker is first run on
# a small tree with known broken links, so a checker that passes everything
# fails here.  Needs only Python 3 (standard library).
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

# 1. the checker finds what is broken, and only that
mkdir -p "$T/tree/docs/perf"
cat > "$T/tree/README.md" <<'MD'
# Top

## The `ds4` command: flags & more

See [ok](docs/a.md), [ok anchor](docs/a.md#second-part), [self](#top),
[code anchor](#the-ds4-command-flags--more), [web](https://example.com/x),
[missing](docs/none.md), [bad anchor](docs/a.md#nowhere),
`[in code](docs/none2.md)`.

```
[in a block](docs/none3.md)
```
MD
cat > "$T/tree/docs/a.md" <<'MD'
# A

## Second part

[up](../README.md#top) [perf](perf/p.md) [dup](#a-1)

## A
MD
printf '# P\n\n[back](../a.md#second-part) [gone](../../../etc/passwd)\n' > "$T/tree/docs/perf/p.md"
"$PY" tools/check_links.py "$T/tree" > "$T/out" 2> "$T/err"
st=$?
want="README.md:7: docs/none.md: no such file
README.md:7: docs/a.md#nowhere: no heading with this anchor in docs/a.md
docs/perf/p.md:3: ../../../etc/passwd: "
if [ "$st" = 1 ] && [ "$(wc -l < "$T/out")" = 3 ] \
   && grep -qxF "README.md:7: docs/none.md: no such file" "$T/out" \
   && grep -qxF "README.md:7: docs/a.md#nowhere: no heading with this anchor in docs/a.md" "$T/out" \
   && grep -q "^docs/perf/p.md:3: ../../../etc/passwd: " "$T/out"; then
    ok "check_links finds the 3 broken links of the sample tree and nothing else"
else
    bad "check_links on the sample tree: exit $st, expected 1 and:"; echo "$want"; echo "got:"; cat "$T/out" "$T/err"
fi

# 2. this checkout's documentation
if "$PY" tools/check_links.py > "$T/out" 2> "$T/err"; then
    ok "every relative link and anchor resolves ($(cat "$T/err"))"
else
    bad "broken links:"; cat "$T/out" "$T/err"
fi

# 3. README.md is a front page
n=$(wc -l < README.md)
if [ "$n" -le 500 ]; then ok "README.md is $n lines (at most 500)"; else bad "README.md is $n lines, more than 500: move reference text to docs/"; fi

# 4. the index lists every page
missing=""
for f in $(cd docs && find . -name '*.md' ! -path ./README.md | sed 's|^\./||' | sort); do
    grep -qF "]($f)" docs/README.md 2>/dev/null || missing="$missing $f"
done
[ -z "$missing" ] && ok "docs/README.md links every page of docs/" || bad "docs/README.md does not link:$missing"

[ "$fail" = 0 ] && echo "t_docs: all passed" || { echo "t_docs: $fail failed"; exit 1; }
