/*
 * fs.c - envd's filesystem.Filesystem service (Stat, ListDir, MakeDir, Move, Remove,
 * WatchDir) over the core's file operations (files.h), acting as the request's user.
 */
#include "sandbox/e2b/e2b_int.h"

void e2b_fs_routes(struct e2b *e)
{
}
