/*
 * version.c -- ds4_version(): the one version string of every binary.
 *
 * DS4_VERSION (ds4.h) is the release number; the build adds what
 * `git describe` says about the checkout (build/gen/ds4_git.h, written by
 * the Makefile, empty outside a git checkout) so that two builds of the
 * same release can be told apart.  Nothing else lives here.
 */
#include "ds4.h"
#include "ds4_git.h"

const char *ds4_version(void) {
#ifdef DS4_GIT_DESCRIBE
    if (DS4_GIT_DESCRIBE[0]) return DS4_VERSION " (git " DS4_GIT_DESCRIBE ")";
#endif
    return DS4_VERSION;
}
