/*
 * api.c -- the table from API family to response shaper (api.h).
 *
 * Owns nothing else: the shapers live in api_openai.c, api_responses.c and
 * api_anthropic.c; job.c asks this table once per job.
 */
#include "api.h"

job_event_fn api_shaper(api_kind api) {
    switch (api) {
    case API_CHAT: return openai_chat_event;
    case API_COMPLETIONS: return openai_completions_event;
    case API_RESPONSES: return responses_event;
    case API_MESSAGES: return anthropic_event;
    }
    return openai_chat_event;
}
