/*
 * test_eval.c -- the graders of ds4-eval (tools/eval/grade.c) on tables of
 * right and wrong answers per kind, and the embedded question set's shape
 * (unique ids, every expected value parseable by its grader).
 */
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "../tools/eval/grade.h"
#include "testutil.h"

#define DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c"
#define TC_OPEN "\n\n<" DSML "tool_calls>\n"
#define TC_CLOSE "</" DSML "tool_calls>"
#define INV(n) "<" DSML "invoke name=\"" n "\">\n"
#define INV_END "</" DSML "invoke>\n"
#define PAR(n, s, v) "<" DSML "parameter name=\"" n "\" string=\"" s "\">" v "</" DSML "parameter>\n"

typedef struct {
    ev_kind kind;
    const char *expect, *args;
    const char *reply;
    int pass;
    const char *answer;     /* what the grader should say it compared */
} gcase;

static const gcase k_cases[] = {
    /* numbers */
    { EV_NUMBER, "391", NULL, "17 * 23 = 391.\nAnswer: 391", 1, "391" },
    { EV_NUMBER, "391", NULL, "Answer: 391.", 1, "391" },
    { EV_NUMBER, "391", NULL, "**Answer:** 391", 1, "391" },
    { EV_NUMBER, "391", NULL, "The result is 391", 1, "391" },
    { EV_NUMBER, "391", NULL, "17 * 23 = 381\nAnswer: 381", 0, "381" },
    { EV_NUMBER, "9", NULL, "x = 9. Check: 3*9 + 7 = 34", 0, "34" },   /* no marker: the last number */
    { EV_NUMBER, "9", NULL, "3x = 27 so x = 9.\nAnswer: 9", 1, "9" },
    { EV_NUMBER, "6912", NULL, "Answer: 6,912", 1, "6912" },
    { EV_NUMBER, "0.1", NULL, "Answer: 0.10", 1, "0.10" },
    { EV_NUMBER, "0.1", NULL, "Answer: 0.01", 0, "0.01" },
    { EV_NUMBER, "-14", NULL, "Answer: -14", 1, "-14" },
    { EV_NUMBER, "-14", NULL, "Answer: 14", 0, "14" },
    { EV_NUMBER, "5", NULL, "The answer is 5 cents.", 1, "5" },
    { EV_NUMBER, "5", NULL, "I don't know.", 0, "" },
    { EV_NUMBER, "5", NULL, "", 0, "" },
    /* choices */
    { EV_CHOICE, "B", NULL, "Answer: B", 1, "B" },
    { EV_CHOICE, "B", NULL, "The capital is Canberra.\n\nAnswer: **B**", 1, "B" },
    { EV_CHOICE, "B", NULL, "B", 1, "B" },
    { EV_CHOICE, "B", NULL, "B) Canberra", 1, "B" },
    { EV_CHOICE, "B", NULL, "Answer: (C)", 0, "C" },
    { EV_CHOICE, "B", NULL, "A lot of people think Sydney.", 0, "A" },  /* no marker: the last letter */
    { EV_CHOICE, "B", NULL, "Answer: Canberra", 0, "" },
    { EV_CHOICE, "C", NULL, "Answer: Dante, so C", 1, "C" },
    { EV_CHOICE, "C", NULL, "no idea", 0, "" },
    /* regexes */
    { EV_REGEX, "saturday", NULL, "Answer: Saturday", 1, "Saturday" },
    { EV_REGEX, "saturday", NULL, "Wednesday + 3 days.\nAnswer: Friday", 0, "Friday" },
    { EV_REGEX, "(^|[^a-z])cba([^a-z]|$)", NULL, "Answer: `cba`", 1, "`cba`" },
    { EV_REGEX, "(^|[^a-z])cba([^a-z]|$)", NULL, "Answer: abcba", 0, "abcba" },
    { EV_REGEX, "^[^a-z]*yes([^a-z]|$)", NULL, "Answer: Yes.", 1, "Yes." },
    { EV_REGEX, "^[^a-z]*yes([^a-z]|$)", NULL, "Answer: not yes", 0, "not yes" },
    /* tool calls */
    { EV_TOOL, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}",
      "Let me check." TC_OPEN INV("get_weather") PAR("city", "true", "Paris") PAR("unit", "true", "celsius") INV_END TC_CLOSE,
      1, "get_weather({\"city\": \"Paris\", \"unit\": \"celsius\"})" },
    { EV_TOOL, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}",
      TC_OPEN INV("get_weather") PAR("unit", "true", "celsius") PAR("city", "true", "Paris") INV_END TC_CLOSE,
      1, "get_weather({\"unit\": \"celsius\", \"city\": \"Paris\"})" },   /* key order is free */
    { EV_TOOL, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}",
      TC_OPEN INV("get_weather") PAR("city", "true", "Paris") PAR("unit", "true", "fahrenheit") INV_END TC_CLOSE,
      0, "get_weather({\"city\": \"Paris\", \"unit\": \"fahrenheit\"})" },
    { EV_TOOL, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}",
      TC_OPEN INV("get_weather") PAR("city", "true", "Paris") INV_END TC_CLOSE, 0, "get_weather({\"city\": \"Paris\"})" },
    { EV_TOOL, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}",
      TC_OPEN INV("weather") PAR("city", "true", "Paris") PAR("unit", "true", "celsius") INV_END TC_CLOSE,
      0, "weather({\"city\": \"Paris\", \"unit\": \"celsius\"})" },
    { EV_TOOL, "convert_currency", "{\"amount\": 250, \"from\": \"USD\", \"to\": \"EUR\"}",
      TC_OPEN INV("convert_currency") PAR("amount", "false", "250.0") PAR("from", "true", "USD") PAR("to", "true", "EUR")
      INV_END TC_CLOSE, 1, "convert_currency({\"amount\": 250.0, \"from\": \"USD\", \"to\": \"EUR\"})" },
    { EV_TOOL, "convert_currency", "{\"amount\": 250, \"from\": \"USD\", \"to\": \"EUR\"}",
      TC_OPEN INV("convert_currency") PAR("amount", "true", "250") PAR("from", "true", "USD") PAR("to", "true", "EUR")
      INV_END TC_CLOSE, 0, "convert_currency({\"amount\": \"250\", \"from\": \"USD\", \"to\": \"EUR\"})" },   /* a string, not a number */
    { EV_TOOL, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}",
      "I would call get_weather(city=Paris).", 0, "(no tool call)" },
    { EV_TOOL, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}",
      TC_OPEN INV("get_weather") PAR("city", "true", "Paris") PAR("unit", "true", "celsius") INV_END
      INV("get_weather") PAR("city", "true", "Rome") PAR("unit", "true", "celsius") INV_END TC_CLOSE,
      0, "get_weather({\"city\": \"Paris\", \"unit\": \"celsius\"}) + 1 more call(s)" },
    { EV_TOOL, "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}",
      TC_OPEN INV("get_weather") PAR("city", "true", "Paris") PAR("unit", "true", "celsius"), 0, NULL },  /* unterminated */
};

static void test_graders(void) {
    for (size_t i = 0; i < sizeof k_cases / sizeof *k_cases; i++) {
        const gcase *c = &k_cases[i];
        ev_question q = { "x", "test", c->kind, "", c->expect, c->args };
        ds4_buf ans = { 0 };
        int got = ev_grade(&q, c->reply, strlen(c->reply), &ans);
        CHECK(got == c->pass, "case %zu (%s, %s): reply '%s' graded %s", i, ev_kind_name(c->kind), c->expect,
              c->reply, got ? "pass" : "fail");
        if (c->answer)
            CHECK(strcmp(ans.p ? ans.p : "", c->answer) == 0, "case %zu: answer '%s', expected '%s'", i,
                  ans.p ? ans.p : "", c->answer);
        ds4_buf_free(&ans);
    }
}

static void test_question_set(void) {
    CHECK(ev_n_questions >= 60, "%d questions", ev_n_questions);
    int kinds[4] = { 0 };
    json_t *tools = json_loads(ev_tools_json, 0, NULL);
    CHECK(json_is_array(tools), "ev_tools_json is a JSON array");
    for (int i = 0; i < ev_n_questions; i++) {
        const ev_question *q = &ev_questions[i];
        kinds[q->kind]++;
        for (int j = 0; j < i; j++) CHECK(strcmp(q->id, ev_questions[j].id) != 0, "duplicate id %s", q->id);
        CHECK(q->prompt && *q->prompt && q->expect && *q->expect, "%s: empty", q->id);
        if (q->kind == EV_NUMBER) {
            char *end;
            strtod(q->expect, &end);
            CHECK(*end == 0, "%s: expected '%s' is not a number", q->id, q->expect);
        } else if (q->kind == EV_CHOICE) {
            CHECK(strlen(q->expect) == 1 && q->expect[0] >= 'A' && q->expect[0] <= 'F', "%s: letter", q->id);
            char opt[4] = { '\n', q->expect[0], ')', 0 };
            CHECK(strstr(q->prompt, opt) != NULL, "%s: option %c not offered", q->id, q->expect[0]);
        } else if (q->kind == EV_REGEX) {
            regex_t re;
            CHECK(regcomp(&re, q->expect, REG_EXTENDED | REG_ICASE | REG_NOSUB) == 0, "%s: bad regex", q->id);
            regfree(&re);
        } else {
            json_t *a = json_loads(q->args ? q->args : "", 0, NULL);
            CHECK(json_is_object(a), "%s: args not a JSON object", q->id);
            json_decref(a);
            int found = 0;
            for (size_t t = 0; t < json_array_size(tools); t++) {
                const char *n = json_string_value(json_object_get(json_object_get(json_array_get(tools, t), "function"), "name"));
                if (n && strcmp(n, q->expect) == 0) found = 1;
            }
            CHECK(found, "%s: tool %s not offered", q->id, q->expect);
        }
        /* the expected answer written the way the prompt asks passes */
        if (q->kind == EV_NUMBER || q->kind == EV_CHOICE) {
            char reply[128];
            snprintf(reply, sizeof reply, "Reasoning 12 and 7.\nAnswer: %s", q->expect);
            ds4_buf ans = { 0 };
            CHECK(ev_grade(q, reply, strlen(reply), &ans) == 1, "%s: its own answer fails", q->id);
            ds4_buf_free(&ans);
        }
    }
    json_decref(tools);
    for (int k = 0; k < 4; k++) CHECK(kinds[k] >= 5, "kind %s has %d questions", ev_kind_name(k), kinds[k]);
}

int main(void) {
    test_graders();
    test_question_set();
    printf("test_eval: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
