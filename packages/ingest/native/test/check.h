/* The check macro and tally of the native C unit tests (test_*.c, run by native/test/run.sh). */
#ifndef SPW_TEST_CHECK_H
#define SPW_TEST_CHECK_H

#include <stdio.h>

static int failures, checks;

/* Counts a check; a false one is reported with its file and line, and the run goes on. */
#define CHECK(cond)                                                            \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

/* Prints "<what> unit tests: N checks, M failures" and gives main's exit status. */
static inline int check_summary(const char *what) {
  printf("%s unit tests: %d checks, %d failures\n", what, checks, failures);
  return failures ? 1 : 0;
}

#endif
