/* Helpers of the send and receive unit tests (test-send.c, which defines
 * them, and test-send-rollback.c): in-memory pools, streams in buffers,
 * receives fed in random pieces, and comparisons of states and listings.
 */
#ifndef CAIRN_TEST_SEND_H
#define CAIRN_TEST_SEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dev.h"
#include "pool.h"
#include "replicate.h"
#include "test-pool.h"
#include "test-util.h"

#define MIB (1024u * 1024)
#define VOL_SIZE (8u * MIB)

/* A growing buffer: the sink of a stream. */
struct buf {
  uint8_t *p;
  size_t len, cap;
};

/* A source pool with v@s1 and v@s2 (written between them), and the full
 * stream of s1 and the incremental one from s1 to s2.
 */
struct source {
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct buf full, incr;
};

/* A formatted in-memory device of size bytes, and its pool opened. */
/* Close the pool, check it with fsck (no problem allowed), reopen it. */
struct cairn_pool *fsck_reopen (struct cairn_dev *dev, struct cairn_pool *pool,
                                const char *when);
/* The sink of a stream into a struct buf. */
int buf_sink (void *opaque, const void *data, size_t len);
/* Send snap (from: NULL or the base; resume: NULL or a token) into a new
 * buffer.
 */
struct buf send_to_buf (struct cairn_pool *pool, const char *snap,
                        const char *from, const char *resume);
/* Receive len bytes of a stream into target, fed in pieces of random
 * sizes; returns what repl_recv_finish returned (res may be NULL).
 */
int receive_buf (struct cairn_pool *pool, const char *target, const uint8_t *p,
                 size_t len, struct rng *rng, struct repl_recv_result *res);
/* The same with receive options (opts may be NULL). */
int receive_opts (struct cairn_pool *pool, const char *target,
                  const uint8_t *p, size_t len, struct rng *rng,
                  const struct repl_recv_opts *opts,
                  struct repl_recv_result *res);
/* Assert that two states (in two pools) read the same, byte for byte. */
void assert_same (struct cairn_pool *pa, const char *a, struct cairn_pool *pb,
                  const char *b);
/* vol_list as text (free it). */
char *listing (struct cairn_pool *pool);
/* Random writes, zeros and trims on a live volume. */
void scribble (struct cairn_pool *pool, const char *name, struct rng *rng,
               unsigned ops);
/* Write block number block of a volume with a pattern from tag. */
void write_block (struct cairn_pool *pool, const char *name, uint64_t block,
                  uint64_t tag);
void source_make (struct source *src, struct rng *rng);
void source_free (struct source *src);
/* A receiving pool; with base, v@s1 received into it already. */
struct cairn_pool *target_make (struct cairn_dev **devp, struct source *src,
                                bool base, struct rng *rng);
/* Check that a failed receive changed nothing vol_list shows, before and
 * after a reopen with fsck.
 */
struct cairn_pool *assert_unchanged (struct cairn_dev *dev,
                                     struct cairn_pool *pool,
                                     const char *before, const char *when);

#endif /* CAIRN_TEST_SEND_H */
