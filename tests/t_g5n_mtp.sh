#!/usr/bin/env bash
# t_g5n_mtp.sh -- glm5-next's NextN (MTP) block (docs/family.md, "MTP") on
# tiny random-weight files of tests/glm_gguf.py glm5-next with --set
# nextn=1 (the block at blk.6: nextn.eh_proj/enorm/hnorm and a DSA layer
# with its own k-pool indexer and a MoE FFN, no hc_* tensors; with
# nextn_head=1 also its own embed_tokens / shared_head_norm /
# shared_head_head).  The same checks as t_glm_mtp.sh:
#
#  1. The block's draft logits against the float64 reference
#     (tests/oracle/glm_ref.py --mtp, Glm5Next.mtp: the post-norm main
#     state, a plain residual, the block's own indexer, which selects past
#     position 35 here): at each of 100 positions and a chain of three
#     drafts, written by tests/test_glm_mtp.c: relative L2 <= 1e-5 per row
#     and the same top-1 before the first indexer near-tie of the main model
#     (measured ~3e-6).  test_glm_mtp also checks bit for bit: prefill ==
#     token by token == chunks, speculative greedy == plain greedy with the
#     block's logits after it == a fresh prefill's, rewinds to checkpoints,
#     a snapshot round trip (G5NS 3 carries the block's rows: the restored
#     session drafts the same chain), and a G5NS 2 snapshot read as before.
#  2. ds4 --mtp-draft 1, 2, 4 (greedy): the output of plain decoding, byte
#     for byte, with the acceptance line; sampled: the same seed, the same
#     output.
#  3. The block from a sidecar (--mtp FILE): the same output and drafts.
#  4. ds4-server (ds4_mtp_draft 2 against 0, temperature 0: the same text)
#     and ds4-agent (--mtp-draft 2 against none, --temp 0: the same turns).
#  5. Refusals: --mtp-draft on a file without the block, --mtp naming a
#     file without it, a misshapen block (every problem named).
set -u
cd "$(dirname "$0")/.." || exit 1
# the checks are tests/lib/glm_mtp.sh's (shared with t_glm_mtp; binaries from
# DS4_BIN_DIR, so the sanitizer pass runs it too)
NAME=t_g5n_mtp ARCH=glm5-next NL=6 MTPN=28
. tests/lib/glm_mtp.sh
