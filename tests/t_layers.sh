#!/usr/bin/env bash
# The layers of the source hold (tools/check_layers.py, its header has the
# rules): src/ wings include only their own or lower wings, store/ and
# mpi/ reach the engine through public headers, front ends include public headers only
# (a short list of tools with internal access, each with its reason), no
# two modules include each other in a circle, and no modules of src/ or
# agent/ call each other in a circle.
#
# Then the checker itself: each kind of violation, planted in a small tree
# of its own, must be reported (a checker that passes everything would
# otherwise pass here too).
set -u
cd "$(dirname "$0")/.."
fail=0
/usr/bin/python3 tools/check_layers.py || fail=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A clean little tree: base < engine, a front end on the public header.
plant_clean() {
    rm -rf "$tmp/t" && mkdir -p "$tmp/t/src/base" "$tmp/t/src/engine" "$tmp/t/cli" "$tmp/t/agent"
    printf 'int b_one(void);\n' > "$tmp/t/src/base/b.h"
    printf '#include "base/b.h"\nint b_one(void) { return 1; }\n' > "$tmp/t/src/base/b.c"
    printf '#include "base/b.h"\nint e_two(void);\n' > "$tmp/t/src/engine/e.h"
    printf '#include "engine/e.h"\nint e_two(void) { return b_one() + 1; }\n' > "$tmp/t/src/engine/e.c"
    printf 'int e_two(void);\n' > "$tmp/t/src/ds4.h"
    printf '#include "ds4.h"\nint main(void) { return e_two(); }\n' > "$tmp/t/cli/main.c"
    printf 'int a_x(void);\nint a_y(void);\n' > "$tmp/t/agent/a.h"
    printf '#include "a.h"\nint a_x(void) { return 0; }\n' > "$tmp/t/agent/x.c"
    printf '#include "a.h"\nint a_y(void) { return a_x(); }\n' > "$tmp/t/agent/y.c"
}
# expect NAME PATTERN: the checker fails on the planted tree, naming PATTERN
expect() {
    local out
    if out=$(/usr/bin/python3 tools/check_layers.py "$tmp/t" 2>&1); then
        echo "FAIL: check_layers passed a tree with $1"; fail=1
    elif ! grep -q -- "$2" <<<"$out"; then
        echo "FAIL: check_layers on $1 did not say '$2':"; echo "$out"; fail=1
    fi
}

plant_clean
if ! out=$(/usr/bin/python3 tools/check_layers.py "$tmp/t" 2>&1); then
    echo "FAIL: check_layers refused the clean planted tree:"; echo "$out"; fail=1
fi

plant_clean   # a lower wing includes a higher one
printf '#include "engine/e.h"\n' >> "$tmp/t/src/base/b.c"
expect "base including engine" 'src/engine is above src/base'

plant_clean   # a front end includes an internal header
printf '#include "engine/e.h"\n' >> "$tmp/t/cli/main.c"
expect "a front end on an internal header" 'an internal header of src/engine'

plant_clean   # a public header brings an internal one with it
printf '#include "engine/e.h"\n' >> "$tmp/t/src/ds4.h"
expect "a public header on an internal one" 'a public header includes only'

plant_clean   # the transport reaches into the engine's internals
mkdir -p "$tmp/t/src/mpi" && printf '#include "engine/e.h"\nint m_one(void) { return 1; }\n' > "$tmp/t/src/mpi/m.c"
expect "mpi on an internal engine header" 'src/mpi uses the engine through public headers only'

plant_clean   # two modules include each other
printf 'int e_three(void);\n' > "$tmp/t/src/engine/f.h"
printf '#include "engine/f.h"\n' >> "$tmp/t/src/engine/e.h"
printf '#include "engine/e.h"\n' >> "$tmp/t/src/engine/f.h"
expect "an include circle" 'include cycle: src/engine/e'

plant_clean   # two modules call each other through one shared header
printf 'int a_z(void) { return a_y(); }\n' >> "$tmp/t/agent/x.c"
printf 'int a_z(void);\n' >> "$tmp/t/agent/a.h"
expect "a call circle" 'call cycle: agent/x (a_y) -> agent/y (a_x) -> agent/x'

plant_clean   # a wing the order does not know
mkdir -p "$tmp/t/src/extra" && printf 'int z;\n' > "$tmp/t/src/extra/z.c"
expect "an unknown wing" 'src/extra is not in the layer order'

[ "$fail" = 0 ] && echo "t_layers: the tree holds; the checker caught each planted violation"
exit "$fail"
