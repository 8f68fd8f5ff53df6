/*
 * test_toolmem.c -- the server's tool-call memory (server/toolmem.c,
 * compiled in here: it uses only the library and jansson):
 *   - toolmem_merge_artifact: exactly the two merge artifacts it defines
 *     (last delta(s) only; every delta doubled in place) and nothing else
 *     (edits, truncations at the end, additions, empty copies, identical
 *     copies, a pathological repeated byte within the work cap);
 *   - toolmem_match accepts arguments that differ only by merging and
 *     refuses changed ones;
 *   - GLM calls replay exactly: parsed by ds4_glm_calls, remembered, sent
 *     back by a client with its own JSON spacing, matched, rendered by the
 *     GLM renderer with the remembered text: the model's bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../server/toolmem.c"

#include "testutil.h"

static int art(const char *client, const char *mem) {
    return toolmem_merge_artifact(client, strlen(client), mem, strlen(mem));
}

typedef struct { char name[4][32]; char args[4][256]; int n; } glm_seen;

static void glm_ev(void *ud, const ds4_dsml_event *ev) {
    glm_seen *g = ud;
    if (ev->kind == DS4_DSML_CALL_BEGIN && g->n < 4) {
        snprintf(g->name[g->n], sizeof g->name[0], "%.*s", (int)ev->len, ev->text);
        g->args[g->n][0] = 0;
        g->n++;
    } else if (ev->kind == DS4_DSML_ARGS_DELTA && g->n) {
        size_t l = strlen(g->args[g->n - 1]);
        snprintf(g->args[g->n - 1] + l, sizeof g->args[0] - l, "%.*s", (int)ev->len, ev->text);
    }
}

static void glm_replay(void) {
    /* The model wrote a compact JSON value: not the canonical rendering. */
    const char *out = "Both.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
                      "<arg_key>opts</arg_key><arg_value>{\"days\":3}</arg_value></tool_call>"
                      "<tool_call>get_time</tool_call>";
    glm_seen g = { 0 };
    ds4_glm_calls *p = ds4_glm_calls_new(NULL, glm_ev, &g);
    CHECK(ds4_glm_calls_feed(p, out, strlen(out)) == DS4_OK && ds4_glm_calls_finish(p) == DS4_OK && g.n == 2,
          "GLM calls parsed");
    size_t bl;
    const char *bt = ds4_glm_calls_block_text(p, &bl);
    toolmem *t = toolmem_new(16);
    const char *ids[] = { "c1", "c2" }, *names[] = { g.name[0], g.name[1] }, *args[] = { g.args[0], g.args[1] };
    CHECK(toolmem_put(t, ids, names, args, 2, bt, bl, "why", 3) == 0, "GLM put");
    ds4_tool_call c[2] = { { "c1", "get_weather", "{\"city\":\"Oslo\",\"opts\":{\"days\":3}}" },
                           { "c2", "get_time", "{}" } };
    char *blk = NULL, *rs = NULL;
    CHECK(toolmem_match(t, c, 2, &blk, &rs) == 1, "GLM calls match");
    ds4_message m[2] = { { .role = DS4_ROLE_USER, .content = "q", .content_len = 1 },
                         { .role = DS4_ROLE_ASSISTANT, .content = "Both.", .content_len = 5,
                           .reasoning = rs, .reasoning_len = rs ? strlen(rs) : 0,
                           .tool_calls = c, .n_tool_calls = 2, .dsml_exact = blk } };
    ds4_render_opts o = { .think = DS4_THINK_MAX, .format = DS4_FORMAT_GLM };
    ds4_buf b = { 0 };
    CHECK(ds4_render_chat(m, 2, &o, &b, NULL) == DS4_OK, "GLM render");
    const char *want = "[gMASK]<sop><|system|>Reasoning Effort: Max<|user|>q<|assistant|><think>why</think>";
    CHECK(b.n == strlen(want) + strlen(out) && !memcmp(b.p, want, strlen(want)) &&
          !memcmp(b.p + strlen(want), out, strlen(out)), "GLM replay is the model's bytes: %s", b.p);
    /* Without the memory the canonical rendering differs (JSON spacing). */
    m[1].dsml_exact = NULL;
    b.n = 0;
    CHECK(ds4_render_chat(m, 2, &o, &b, NULL) == DS4_OK && strstr(b.p, "{\"days\": 3}"), "GLM canonical");
    ds4_buf_free(&b);
    free(blk); free(rs);
    toolmem_free(t);
    ds4_glm_calls_free(p);
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

    glm_replay();
    printf("test_toolmem: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
