/*
 * test_toolmem.c -- the server's tool-call memory (server/toolmem.c,
 * compiled in here: it uses only the library and jansson):
 *   - toolmem_merge_artifact: exactly the two merge artifacts it defines
 *     (last delta(s) only; every delta doubled in place) and nothing else
 *     (edits, truncations at the end, additions, empty copies, identical
 *     copies, a pathological repeated byte within the work cap);
 *   - toolmem_match accepts arguments that differ only by merging and
 *     refuses changed ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../server/toolmem.c"

#include "testutil.h"

static int art(const char *client, const char *mem) {
    return toolmem_merge_artifact(client, strlen(client), mem, strlen(mem));
}

int main(void) {
    const char *mem = "The user wants the files listed.";
    /* last delta only (openai-node's stream helper) */
    CHECK(art("listed.", mem) == 1, "suffix");
    CHECK(art(" files listed.", mem) == 1, "longer suffix");
    /* every delta doubled: "The" "user" ... */
    CHECK(art("TheThe user user wants wants the files the files listed. listed.", mem) == 1, "doubled deltas");
    CHECK(art("The user wants the files listed.The user wants the files listed.", mem) == 1,
          "one delta doubled (the whole text twice)");
    CHECK(art("TThhee  uusseerr  wwaannttss  tthhee  ffiilleess  lliisstteedd..", mem) == 1,
          "byte-sized deltas doubled");
    /* not merge artifacts */
    CHECK(art(mem, mem) == 0, "identical is not an artifact");
    CHECK(art("", mem) == 0, "empty is the caller's case");
    CHECK(art("The user wants the files", mem) == 0, "a cut at the end is the client's");
    CHECK(art("The user wants the files listed!", mem) == 0, "an edit");
    CHECK(art("The user wants the files listed. Also more.", mem) == 0, "an addition");
    CHECK(art("TheThe user wants the files listed.", mem) == 0, "one piece doubled only");
    CHECK(art("listed", mem) == 0, "not a suffix");
    CHECK(art("TheThe user user wants wants the files the files listed. listed!", mem) == 0,
          "doubled but edited");
    /* a pathological input stays bounded */
    size_t n = 20000;
    char *a = malloc(n + 1), *aa = malloc(2 * n + 2);
    memset(a, 'a', n); a[n] = 0;
    memset(aa, 'a', 2 * n); aa[2 * n] = 'b'; aa[2 * n + 1] = 0;
    CHECK(toolmem_merge_artifact(aa, 2 * n, a, n) == 1, "repeated byte doubled");
    CHECK(art(aa, a) == 0, "repeated byte + edit: refused (length differs)");
    free(a); free(aa);

    /* matching with merged arguments */
    toolmem *t = toolmem_new(16);
    const char *ids[] = { "call_a" }, *names[] = { "run" }, *args[] = { "{\"cmd\":\"ls\"}" };
    CHECK(toolmem_put(t, ids, names, args, 1, "<block>", 7, "why", 3) == 0, "put");
    ds4_tool_call c = { 0 };
    c.id = "call_a";
    c.name = "run";
    c.arguments = "{\"cmd\": \"ls\"}";
    char *blk = NULL, *rs = NULL;
    CHECK(toolmem_match(t, &c, 1, &blk, &rs) == 1 && !strcmp(blk, "<block>") && !strcmp(rs, "why"),
          "JSON-equal arguments match");
    free(blk); free(rs);
    c.arguments = "{\"cmd\"{\"cmd\":\"ls\"}:\"ls\"}";
    CHECK(toolmem_match(t, &c, 1, &blk, &rs) == 1, "doubled argument deltas match");
    free(blk); free(rs);
    c.arguments = "{\"cmd\":\"rm\"}";
    CHECK(toolmem_match(t, &c, 1, &blk, &rs) == 0, "changed arguments do not match");
    toolmem_free(t);

    printf("test_toolmem: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
