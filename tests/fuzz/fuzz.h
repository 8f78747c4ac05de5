/* Cairn fuzz harnesses: what they share (tests/fuzz/README.md).
 *
 * Each harness defines LLVMFuzzerTestOneInput.  In a build configured with
 * --enable-fuzzing, libFuzzer supplies main(); in every other build
 * replay.c does, and runs the harness over the files and directories it is
 * given, so that `make check` replays every corpus and regression input
 * under gcc, with or without the sanitizers.
 *
 * A pool image that harnesses start from is built once, by a function
 * that fills a fresh pool, and kept as its nonzero blocks: a new memory
 * device holding it costs a copy of a few hundred KiB, so that each input
 * runs against the same pool and a crash replays exactly.
 */
#ifndef CAIRN_TESTS_FUZZ_H
#define CAIRN_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dev.h"
#include "pool.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* The memory device of every fuzzed pool (the engine's least). */
#define FUZZ_POOL_SIZE POOL_MIN_SIZE
#define FUZZ_BLOCK 4096u
#define FUZZ_POOL_BLOCKS (FUZZ_POOL_SIZE / FUZZ_BLOCK)

/* A pool image: its nonzero blocks. */
struct fuzz_image {
  uint32_t *blocks;          /* block numbers, increasing */
  uint8_t *data;             /* FUZZ_BLOCK bytes each */
  size_t n;
};

/* Format a pool (fixed UUID), open it, let fill make what the harness
 * needs (a nonzero return aborts the harness with the engine's message),
 * close it and keep its blocks.
 */
void fuzz_image_build (struct fuzz_image *img,
                       int (*fill) (struct cairn_pool *pool));
/* A new memory device holding the image. */
struct cairn_dev *fuzz_image_dev (const struct fuzz_image *img);
/* Open the pool on dev small, without background threads and with a
 * fixed clock: 0, or the engine's error.
 */
int fuzz_pool_open (struct cairn_dev *dev, bool readonly,
                    struct cairn_pool **poolp);
/* Check the pool on dev with fsck: the number of problems (each printed
 * when verbose), or -1 when fsck could not run.
 */
int64_t fuzz_fsck (struct cairn_dev *dev, bool verbose);

/* Write a pattern that names the volume, its version and each block's
 * offset into len bytes at off of the volume behind export name.
 */
int fuzz_fill_volume (struct cairn_pool *pool, const char *name, char tag,
                      uint64_t off, uint64_t len);
/* The byte fuzz_fill_volume wrote at volume offset off with tag. */
uint8_t fuzz_pattern_byte (char tag, uint64_t off);

/* Print the message and abort: a harness's own failure or a broken
 * invariant, which libFuzzer reports as a crash.
 */
void fuzz_die (const char *fmt, ...)
  __attribute__ ((noreturn, format (printf, 1, 2)));

#endif /* CAIRN_TESTS_FUZZ_H */
