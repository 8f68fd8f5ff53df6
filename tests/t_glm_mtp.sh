#!/usr/bin/env bash
# t_glm_mtp.sh -- glm-dsa's NextN (MTP) block (docs/family.md, "MTP") on
# tiny random-weight files of tests/glm_gguf.py with --set nextn=1 (the
# block at blk.4: nextn.eh_proj/enorm/hnorm and a MoE layer; with
# nextn_head=1 also its own embed_tokens / shared_head_norm /
# shared_head_head):
#
#  1. The block's draft logits against the float64 reference
#     (tests/oracle/glm_ref.py --mtp): at each of 100 positions (row p from
#     token p and the main model's normed state after p - 1), and a chain
#     of three drafts after a prefill (step i > 0 from the previous step's
#     normed state), written by tests/test_glm_mtp.c: relative L2 <= 1e-5
#     per row and the same top-1, before the first indexer near-tie of the
#     main model (tests/llamacpp_compare.py's rule).  Why 1e-5: float32
#     against float64, measured ~1.2e-6; a wrong input order, the
#     pre-norm state or the indexer in the block move rows by 1e-2 and more.
#     test_glm_mtp also checks, bit for bit: one prefill == token by token
#     == chunks, speculative greedy == plain greedy with the block's logits
#     after it == a fresh prefill's, rewinds.
#  2. ds4 --mtp-draft 1, 2, 4 (greedy): the output is that of plain
#     decoding, byte for byte, and the acceptance line is printed; sampled
#     (--temp 1 --seed): the same seed gives the same output.
#  3. The block from a sidecar (--mtp FILE: the file split into a trunk
#     without blk.4.* and a sidecar with it, as llama.cpp's converter
#     writes them): the same output and drafts as the block in the file.
#  4. ds4-server (ds4_mtp_draft 2 against 0, temperature 0: the same text)
#     and ds4-agent (--mtp-draft 2 against none, --temp 0: the same turns)
#     on the file over tests/glm_vocab.py's vocabulary.
#  5. Refusals: --mtp-draft on a file without the block, --mtp naming a
#     file without it, a misshapen block (every problem named).
set -u
cd "$(dirname "$0")/.." || exit 1
# the checks are tests/lib/glm_mtp.sh's (shared with t_g5n_mtp; binaries from
# DS4_BIN_DIR, so the sanitizer pass runs it too)
NAME=t_glm_mtp ARCH=glm-dsa NL=4 MTPN=26
. tests/lib/glm_mtp.sh
