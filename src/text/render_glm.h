/*
 * render_glm.h -- internal to src/text: the GLM prompt renderer that
 * ds4_render_chat (render.c) hands a DS4_FORMAT_GLM conversation to.
 *
 * Owns: this one declaration.  Must not be included outside src/text.
 */
#ifndef DS4_TEXT_RENDER_GLM_H
#define DS4_TEXT_RENDER_GLM_H

#include "ds4.h"

int ds4_render_chat_glm(const ds4_message *msgs, int n_msgs,
                        const ds4_render_opts *opts, ds4_buf *out, char **err);

#endif
