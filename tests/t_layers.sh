#!/usr/bin/env bash
# The layers of the source hold (tools/check_layers.py, its header has the
# rules): src/ wings include only their own or lower wings, store/ reaches
# the engine through public headers, front ends include public headers only
# (a short list of tools with internal access, each with its reason), and
# no two modules include each other in a circle.
set -u
cd "$(dirname "$0")/.."
/usr/bin/python3 tools/check_layers.py
