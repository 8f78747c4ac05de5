/* Helpers of the volume unit tests (test-volume.c, which defines them,
 * test-volume-model.c and test-volume-reclaim.c): in-memory pools and an
 * fsck that must find the pool clean.
 */
#ifndef CAIRN_TEST_VOLUME_H
#define CAIRN_TEST_VOLUME_H

#include <stdint.h>

#include "dev.h"
#include "pool.h"
#include "test-util.h"

/* A formatted in-memory device of size bytes, and its pool opened. */
struct cairn_dev *mem_pool (uint64_t size);
struct cairn_pool *open_pool (struct cairn_dev *dev);
/* Check the pool on dev with fsck: no problem allowed, each one printed;
 * when says at what point of the test.
 */
void assert_fsck_clean (struct cairn_dev *dev, const char *when);

#endif /* CAIRN_TEST_VOLUME_H */
