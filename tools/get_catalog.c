/*
 * get_catalog.c -- the table of get_catalog.h.
 *
 * Owns: the facts about the published files and where each came from.
 * Must not: do I/O.
 *
 * Sources (read 2026; cited per entry below):
 *   [S1] antirez/ds4, download_model.sh at commit 1115603560fd: the
 *        target names, file names, the repository antirez/deepseek-v4-gguf,
 *        the "about N GB" sizes and which targets update ./ds4flash.gguf
 *        (every main model; not mtp and not the two PRO Q4 halves).
 *   [S2] antirez/ds4, download_model.sh at commit 8d576642c39b (2026-05-21):
 *        the older non-imatrix q2 and q4 files, dropped from [S1].
 *   [S3] the model card of huggingface.co/antirez/deepseek-v4-gguf
 *        (README.md, hub commit 6b25e58): 80.8 GiB, 153.3 GiB, 3.6 GiB for
 *        the non-imatrix q2, q4 and the MTP file.
 *
 * Exact sizes and SHA-256 values: none of these publishes them (the hub's
 * file pages were not available to read), so every entry says 0 / NULL.
 * ds4-get does not pretend: it takes the size from the server
 * (Content-Range / Content-Length, the hub's X-Linked-Size) and the SHA-256
 * the hub sends with each LFS file (X-Linked-Etag, the file's SHA-256 that
 * huggingface_hub names its cached blobs by) when it is 64 hex digits; with
 * neither it prints the SHA-256 it computed and records it beside the file.
 * Fill size/sha256 here when they are published: ds4-get then checks them
 * first, before a byte is downloaded where the server sends its own.
 */
#include <string.h>

#include "get_catalog.h"

const get_entry get_catalog[] = {
    /* [S1] q2-imatrix: "2-bit routed experts, about 81 GB on disk.
     * Recommended model for 96 and 128 GB RAM machines." */
    { "q2-imatrix",
      "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf",
      "~81 GB", 0, NULL,
      "Flash: routed experts IQ2_XXS + Q2_K (imatrix), rest Q8_0/F16", 1, 0 },
    /* [S1] q2-q4-imatrix: "mostly q2 routed experts, with the last 6
     * layers using q4 routed experts. About 98 GB on disk." */
    { "q2-q4-imatrix",
      "DeepSeek-V4-Flash-Layers37-42Q4KExperts-OtherExpertLayersIQ2XXSGateUp-Q2KDown-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-fixed.gguf",
      "~98 GB", 0, NULL,
      "Flash: experts Q4_K in layers 37-42, IQ2_XXS + Q2_K elsewhere", 1, 0 },
    /* [S1] q4-imatrix: "4-bit routed experts, about 153 GB on disk." */
    { "q4-imatrix",
      "DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2-imatrix.gguf",
      "~153 GB", 0, NULL,
      "Flash: routed experts Q4_K (imatrix), rest Q8_0/F16", 1, 0 },
    /* [S1] pro-q2-imatrix: "DeepSeek V4 PRO q2 imatrix quant, as a single
     * GGUF file. About 430 GB on disk".  [S1] fetches the PRO files with
     * the Hugging Face CLI ("too large for the curl path"); ds4-get uses the
     * same resolve URL with ranges, which was not tried on these files. */
    { "pro-q2-imatrix",
      "DeepSeek-V4-Pro-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-Instruct-imatrix.gguf",
      "~430 GB", 0, NULL,
      "PRO: routed experts IQ2_XXS + Q2_K (imatrix), rest Q8_0/F16", 1, 0 },
    /* [S1] pro-q4-layers00-30: "First half of the DeepSeek V4 PRO Q4
     * routed-expert quant, layers 0..30 ... About 426 GB."  Not linked:
     * one rank's share of a --dist run. */
    { "pro-q4-layers00-30",
      "DeepSeek-V4-Pro-Q4K-Layers00-30.gguf",
      "~426 GB", 0, NULL,
      "PRO Q4_K experts, layers 0-30 (the first rank of a split run)", 0, 0 },
    /* [S1] pro-q4-layers31-output: "Second half ... layers 31..output ...
     * About 412 GB."  Not linked, as above. */
    { "pro-q4-layers31-output",
      "DeepSeek-V4-Pro-Q4K-Layers-31-output.gguf",
      "~412 GB", 0, NULL,
      "PRO Q4_K experts, layers 31-output (the second rank)", 0, 0 },
    /* [S1] mtp: "Optional legacy one-step speculative decoding component,
     * about 3.5 GB on disk" (3.6 GiB in [S3]); loaded with --mtp FILE,
     * never linked as the model. */
    { "mtp",
      "DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf",
      "~3.5 GB", 0, NULL,
      "the MTP block for --mtp (speculative decoding), not a model", 0, 0 },
    /* [S2] q2: the non-imatrix 2-bit file, "about 81 GB" (80.8 GiB in
     * [S3]); [S1] no longer offers it. */
    { "q2",
      "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2.gguf",
      "~81 GB", 0, NULL,
      "Flash: routed experts IQ2_XXS + Q2_K, rest Q8_0/F16", 1, 1 },
    /* [S2] q4: the non-imatrix 4-bit file, "about 153 GB" (153.3 GiB in
     * [S3]); [S1] no longer offers it. */
    { "q4",
      "DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2.gguf",
      "~153 GB", 0, NULL,
      "Flash: routed experts Q4_K, rest Q8_0/F16", 1, 1 },
};

const int get_catalog_n = (int)(sizeof get_catalog / sizeof get_catalog[0]);

const get_entry *get_catalog_find(const char *name) {
    for (int i = 0; i < get_catalog_n; i++)
        if (!strcmp(get_catalog[i].name, name)) return &get_catalog[i];
    return NULL;
}
