#!/usr/bin/env bash
# The documentation holds together: every relative link of README.md and
# docs/**/*.md leads to a file that exists and, with a #anchor, to a heading
# of it (tools/check_links.py), and README.md stays a user's page of at most
# 500 lines (reference text lives in docs/).
set -u
cd "$(dirname "$0")/.."
/usr/bin/python3 tools/check_links.py --max-readme-lines 500
