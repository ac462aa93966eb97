/*
** check.h: the CHECK macro of the C test programs in this folder. A failed check prints the
** program, the line, the condition and errno, and is counted in failures; main returns
** non-zero when any failed.
*/
#ifndef CAIRN_TEST_CHECK_H
#define CAIRN_TEST_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s: line %d: %s failed (errno %d: %s)\n", __FILE__, __LINE__,      \
                    #cond, errno, strerror(errno));                                              \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

#endif
