/* Cairn fuzz harnesses: main() for builds without libFuzzer.
 *
 * Runs the harness's LLVMFuzzerTestOneInput once on each file named, and
 * on each file in each directory named (not recursively), as libFuzzer
 * does with -runs=0: a crash input, once fixed, replays in every build.
 * Exits 0 when every input ran; a harness that finds a problem aborts.
 */
#include <config.h>

#ifndef CAIRN_LIBFUZZER

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Run the harness on one file. */
static int
replay_file (const char *path)
{
  FILE *fp = fopen (path, "rb");
  uint8_t *data = NULL;
  size_t len = 0, cap = 0, n;

  if (fp == NULL) {
    fprintf (stderr, "replay: %s: %m\n", path);
    return -1;
  }
  do {
    if (len == cap) {
      cap = cap ? 2 * cap : 65536;
      data = realloc (data, cap);
      if (data == NULL) {
        fprintf (stderr, "replay: out of memory\n");
        exit (EXIT_FAILURE);
      }
    }
    n = fread (data + len, 1, cap - len, fp);
    len += n;
  } while (n > 0);
  if (ferror (fp)) {
    fprintf (stderr, "replay: %s: read error\n", path);
    fclose (fp);
    free (data);
    return -1;
  }
  fclose (fp);
  LLVMFuzzerTestOneInput (data, len);
  free (data);
  return 0;
}

/* Order names, so that a directory replays the same way every time. */
static int
name_cmp (const struct dirent **a, const struct dirent **b)
{
  return strcmp ((*a)->d_name, (*b)->d_name);
}

int
main (int argc, char *argv[])
{
  int failed = 0;
  size_t runs = 0;

  for (int i = 1; i < argc; i++) {
    struct stat st;
    struct dirent **names;
    int n;

    if (argv[i][0] == '-')      /* a libFuzzer option: nothing to replay */
      continue;
    if (stat (argv[i], &st) < 0) {
      fprintf (stderr, "replay: %s: %m\n", argv[i]);
      failed = 1;
      continue;
    }
    if (!S_ISDIR (st.st_mode)) {
      failed |= replay_file (argv[i]) < 0;
      runs++;
      continue;
    }
    n = scandir (argv[i], &names, NULL, name_cmp);
    if (n < 0) {
      fprintf (stderr, "replay: %s: %m\n", argv[i]);
      failed = 1;
      continue;
    }
    for (int j = 0; j < n; j++) {
      char *path;

      if (names[j]->d_name[0] != '.' &&
          asprintf (&path, "%s/%s", argv[i], names[j]->d_name) >= 0) {
        if (stat (path, &st) == 0 && S_ISREG (st.st_mode)) {
          failed |= replay_file (path) < 0;
          runs++;
        }
        free (path);
      }
      free (names[j]);
    }
    free (names);
  }
  printf ("replay: %zu inputs\n", runs);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* !CAIRN_LIBFUZZER */
