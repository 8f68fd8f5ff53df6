/*
 * transport.c -- the one registered transport (transport.h).
 *
 * Owns: the table pointer.  Must not: call a hook (the engine's call sites
 * do, through transport.h's wrappers).
 */
#include <stddef.h>

#include "engine/transport.h"

const ds4_transport *ds4_transport_active;

void ds4_transport_set(const ds4_transport *t) { ds4_transport_active = t; }
