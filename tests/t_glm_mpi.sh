#!/usr/bin/env bash
# t_glm_mpi.sh -- --dist pipeline on the GLM graphs (glm_dsa.c, glm5_next.c;
# docs/distributed.md) with the tiny files of tests/glm_gguf.py, 2 to 4 ranks
# on this machine (--oversubscribe), as tests/t_mpi.sh does for V4:
#  - --dump-logits on rank 0 bit-identical (cmp) to one process: balanced
#    splits, prefill, --decode-only and --split; glm-dsa with boundaries on
#    its shared IndexShare layer 3 (the selection crosses the boundary);
#    glm5-next with a shared layer after a KDA layer (the selection crosses
#    a rank of KDA layers only);
#  - per-rank files of ds4-gguf split --dist pipeline give the same logits;
#  - ds4 -p generation identical to one process;
#  - --dist experts refused with its message (run and ds4-gguf split).
# Uses ./ds4 (not DS4_BIN_DIR): optimized build only, as t_mpi.sh.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
if ! command -v mpirun >/dev/null 2>&1; then echo "skip t_glm_mpi: mpirun not installed"; exit 0; fi
if ./ds4 --help | grep -q "no MPI support"; then echo "skip t_glm_mpi: ds4 built without MPI"; exit 0; fi
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-glmmpi.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(timeout 120 mpirun --oversubscribe)
$PY -c "import random; r=random.Random(7); print(' '.join(str(r.randrange(10, 4090)) for _ in range(300)))" > "$T/ids.txt"
$PY tests/glm_gguf.py glm-dsa "$T/g.gguf" > "$T/gen.log" 2>&1 || { bad "glm_gguf.py glm-dsa"; cat "$T/gen.log"; }
$PY tests/glm_gguf.py glm5-next "$T/n.gguf" >> "$T/gen.log" 2>&1 || { bad "glm_gguf.py glm5-next"; cat "$T/gen.log"; }
# glm5-next, 6 layers: KDA, MLA (full), KDA, MLA (shared: layer 1's selection), KDA, MLA (full)
cat > "$T/mk.py" <<'PYEOF'
import sys
sys.path.insert(0, "tests")
import glm_gguf as G
shared = {3}
orig = G.Writer.write
def write(self, path):
    self.tensors = [(n, a) for n, a in self.tensors
                    if not any(n.startswith("blk.%d.indexer" % s) for s in shared)]
    self.add("{arch}.attention.indexer.types", G.ARR, (G.BOOL, [i not in shared for i in range(6)]))
    return orig(self, path)
G.Writer.write = write
sys.exit(G.main(["glm5-next", sys.argv[1], "--set", "dsa_every=2"]))
PYEOF
$PY "$T/mk.py" "$T/s.gguf" >> "$T/gen.log" 2>&1 || { bad "glm5-next with a shared layer"; cat "$T/gen.log"; }

A=(-q -t 1 --tokens-file "$T/ids.txt" -n 0 --chunk 64 --ctx 512)
one() { ./ds4 -m "$1" "${A[@]}" --dump-logits "$2" "${@:3}" > "$T/run.log" 2>&1 || { cat "$T/run.log"; return 1; }; }
dist() {   # dist NP FILE OUT [flags]
    local np=$1 f=$2 o=$3; shift 3
    "${MPIRUN[@]}" -np "$np" ./ds4 -m "$f" "${A[@]}" --dump-logits "$o" --dist pipeline "$@" > "$T/run.log" 2>&1 \
        || { tail -5 "$T/run.log"; return 1; }
}
check() {   # check LABEL NP FILE [flags]: against one process with the same flags
    local label=$1 np=$2 f=$3; shift 3
    local fl=() dl=()
    for a in "$@"; do case $a in --dist-layers=*) dl=(--dist-layers "${a#--dist-layers=}") ;; *) fl+=("$a") ;; esac; done
    one "$f" "$T/one.f32" "${fl[@]}" || { bad "$label: single run"; return; }
    if dist "$np" "$f" "$T/d.f32" "${fl[@]}" "${dl[@]}" && [ -s "$T/d.f32" ] && cmp -s "$T/one.f32" "$T/d.f32"; then
        ok "$label, $np ranks: logits bit-identical"
    else bad "$label, $np ranks: logits differ from one process"; fi
}
for m in g n; do
    for np in 2 3; do
        check "$m prefill" $np "$T/$m.gguf"
        check "$m --decode-only" $np "$T/$m.gguf" --decode-only
        check "$m --split 100" $np "$T/$m.gguf" --split 100
    done
done
check "glm-dsa boundary on shared layer 3" 2 "$T/g.gguf" --dist-layers=0:2,3:3
check "glm-dsa boundary on shared layer 3, --split 100" 3 "$T/g.gguf" --split 100 --dist-layers=0:1,2:2,3:3
check "glm-dsa one layer a rank" 4 "$T/g.gguf" --dist-layers=0:0,1:1,2:2,3:3
check "glm5-next shared layer 3 after a KDA boundary" 2 "$T/s.gguf" --dist-layers=0:1,2:5
check "glm5-next shared layer 3 on a boundary" 2 "$T/s.gguf" --dist-layers=0:2,3:5
check "glm5-next selection through a KDA-only rank" 3 "$T/s.gguf" --split 100 --dist-layers=0:1,2:2,3:5

# per-rank files
for m in g n; do
    one "$T/$m.gguf" "$T/one.f32"
    for np in 2 3; do
        if ./ds4-gguf split --dist pipeline --ranks $np -m "$T/$m.gguf" -o "$T/${m}p$np" > "$T/split.log" 2>&1 &&
           dist $np "$T/${m}p$np-rank%d.gguf" "$T/d.f32" && cmp -s "$T/one.f32" "$T/d.f32"; then
            ok "$m split files, $np ranks: logits bit-identical to the whole file"
        else bad "$m split files, $np ranks"; cat "$T/split.log"; fi
    done
done

# generation (-p over the tiny test vocabulary's ids); the text compared
# without the terminal styling (mpirun's stdout is styled otherwise)
norm() { sed -e 's/\x1b\[[0-9;]*m//g' -e 's#</\?think>##g' "$1" | tr -d ' \n'; }
for m in g n; do
    ./ds4 -m "$T/$m.gguf" -t 1 --ctx 512 -p "hello" -n 12 --temp 0 > "$T/p1" 2> "$T/pe1"
    for np in 2 3; do
        "${MPIRUN[@]}" -np $np ./ds4 -m "$T/$m.gguf" -t 1 --ctx 512 -p "hello" -n 12 --temp 0 --dist pipeline > "$T/p2" 2> "$T/pe2"
        if [ -s "$T/p1" ] && [ "$(norm "$T/p1")" = "$(norm "$T/p2")" ]; then ok "$m ds4 -p, $np ranks: same text as one process"
        else bad "$m ds4 -p, $np ranks"; cat "$T/p1" "$T/p2"; tail -3 "$T/pe2"; fi
    done
done

# refusals
if "${MPIRUN[@]}" -np 2 ./ds4 -m "$T/g.gguf" "${A[@]}" --dist experts > "$T/x.log" 2>&1; then bad "--dist experts ran"
elif grep -q "dist experts is not supported for glm-dsa" "$T/x.log"; then ok "--dist experts refused: $(grep -m1 'not supported' "$T/x.log")"
else bad "--dist experts: no message"; cat "$T/x.log"; fi
if ./ds4-gguf split --dist experts --ranks 2 -m "$T/n.gguf" -o "$T/x" > "$T/x.log" 2>&1; then bad "split --dist experts ran"
elif grep -q "runs --dist pipeline only" "$T/x.log"; then ok "ds4-gguf split --dist experts refused for GLM"
else bad "split --dist experts: no message"; cat "$T/x.log"; fi

[ $fail -eq 0 ] && echo "t_glm_mpi: all passed" || echo "t_glm_mpi: $fail failed"
[ $fail -eq 0 ]
