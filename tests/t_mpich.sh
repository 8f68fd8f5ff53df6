#!/usr/bin/env bash
# The distributed code builds against MPICH too (the other MPI of Debian,
# beside Open MPI): src/mpi/mpi.c is compiled through the Makefile with
# MPICC=mpicc.mpich (-Werror), ds4 is linked from the optimized build's
# other objects and libmpich, and, when MPICH's launcher runs here, a
# 2-rank pipeline and experts run give the single process's logits bits.
# Skipped (with a message) without mpicc.mpich (apt-get install mpich
# libmpich-dev) and in the sanitizer pass (its objects need ASan to link;
# the check is about the MPI library, not memory).
set -u
cd "$(dirname "$0")/.."
S="${DS4_SHARED:-../shared}"
G="$S/golden"
if ! command -v mpicc.mpich >/dev/null 2>&1; then
    echo "skip t_mpich: mpicc.mpich not installed (apt-get install mpich libmpich-dev)"; exit 0
fi
if [ "${DS4_DEBUG_BUILD:-0}" = 1 ]; then
    echo "skip t_mpich: build check of the optimized tree only"; exit 0
fi
B="${DS4_BUILD_DIR:-build}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

FL=$(make -s MPICC=mpicc.mpich mpi-flags)
if [[ $FL == *mpich* ]] &&
   make -s MPICC=mpicc.mpich BUILD="$T/b" OPT="-O2 -Werror" "$T/b/src/mpi/mpi.o" > "$T/cc.log" 2>&1; then
    ok "src/mpi/mpi.c compiles against MPICH without a warning"
else
    bad "src/mpi/mpi.c against MPICH"; cat "$T/cc.log"
fi
LIBS=$(sed -n 's/^MPI_LIBS=//p' <<< "$FL")
if [ -s "$T/b/src/mpi/mpi.o" ] &&
   cc -pthread -o "$T/ds4" $(for c in cli/*.c; do printf '%s ' "$B/${c%.c}.o"; done) "$T/b/src/mpi/mpi.o" "$B/libds4.a" -ljansson -lm $LIBS -ledit \
       > "$T/ld.log" 2>&1 && ldd "$T/ds4" | grep -q libmpich; then
    ok "ds4 links against libmpich"
else
    bad "ds4 against libmpich"; cat "$T/ld.log" 2>/dev/null
fi

# run it under MPICH's launcher when it works here (a container may lack
# what hydra needs: then only the build is checked)
if [ -x "$T/ds4" ] && timeout 30 mpiexec.mpich -n 2 true > /dev/null 2>&1; then
    SEQ="$G/sequences/seq_300.ids.txt"
    ./ds4 -q -t 1 -m "$G/models/tiny-a-q2.gguf" --tokens-file "$SEQ" -n 0 --chunk 64 --dump-logits "$T/one.f32" \
        > "$T/run.log" 2>&1 || { cat "$T/run.log"; bad "single run"; }
    for dm in pipeline experts; do
        if timeout 120 mpiexec.mpich -n 2 "$T/ds4" -q -t 1 -m "$G/models/tiny-a-q2.gguf" --tokens-file "$SEQ" -n 0 \
               --chunk 64 --dump-logits "$T/dist.f32" --dist $dm > "$T/run.log" 2>&1 &&
           cmp -s "$T/one.f32" "$T/dist.f32"; then
            ok "MPICH, $dm, 2 ranks: logits bit-identical"
        else
            bad "MPICH, $dm, 2 ranks"; tail -5 "$T/run.log"
        fi
    done
else
    echo "note t_mpich: mpiexec.mpich does not run here; build checked only"
fi

[ $fail -eq 0 ] && echo "t_mpich: all passed" || echo "t_mpich: $fail failed"
[ $fail -eq 0 ]
