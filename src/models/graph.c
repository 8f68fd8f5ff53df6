/*
 * graph.c -- the registry of model graphs (graph.h): general.architecture
 * (cfg.arch) -> the table of its operations.
 *
 * Owns: the list.  Must not: name a graph's functions (only its table),
 * so that the engine reaching the graphs through it is no call cycle.
 */
#include <stddef.h>

#include "models/graph.h"

static const ds4_graph *const graphs[] = {
    &ds4_graph_deepseek4,
    &ds4_graph_glm_dsa,
    &ds4_graph_glm5_next,
};

const ds4_graph *ds4_graph_for(int arch) {
    for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++)
        if (graphs[i]->arch == arch) return graphs[i];
    return NULL;
}
