/* Cairn engine, layer "dev": whether a thread read from storage during a
 * call (private to dev-file.c and dev-iowatch.c; dev.h, T1).
 *
 *   struct iowatch w;
 *
 *   iowatch_start (&w, use_perf);
 *   ... a read that should come from the host's page cache ...
 *   if (iowatch_quiet (&w)) ... the thread brought nothing in from storage
 *
 * dev-iowatch.c says how it knows.
 */
#ifndef CAIRN_DEV_IOWATCH_H
#define CAIRN_DEV_IOWATCH_H

#include <stdbool.h>
#include <stdint.h>

struct iowatch {
  uint64_t at;                /* the count the call started from */
  int how;                    /* IOWATCH_* */
};

enum {
  IOWATCH_BLIND,              /* nothing could be seen: never quiet */
  IOWATCH_PERF,               /* the thread's perf ring (no system call) */
  IOWATCH_RUSAGE,             /* the thread's ru_inblock (getrusage) */
};

/* Begin watching the calling thread: with its perf ring when use_perf and
 * the host allows one, else with getrusage.
 */
void iowatch_start (struct iowatch *w, bool use_perf);
/* Whether the thread brought nothing in from storage since iowatch_start
 * (and takes the count again for the getrusage watch's next call).
 */
bool iowatch_quiet (const struct iowatch *w);
/* What the thread read since its last call is not the next call's own: a
 * read ahead it asked for (the getrusage watch takes the count again).
 */
void iowatch_rebase (void);
/* How the calling thread is watched when use_perf: "perf" or "getrusage". */
const char *iowatch_method (bool use_perf);

#endif /* CAIRN_DEV_IOWATCH_H */
