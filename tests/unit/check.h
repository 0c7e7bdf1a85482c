/*
 * The checks every C unit test uses. A failed CHECK is reported and counted (the
 * test goes on and exits non-zero at the end: `return failures != 0;`); a failed
 * REQUIRE stops the test at once.
 */
#ifndef PT_TESTS_CHECK_H
#define PT_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int failures;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
            failures++;                                                                \
        }                                                                              \
    } while (0)

/* CHECK with a printf-style explanation of the values involved. */
#define CHECKF(cond, ...)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            failures++;                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
        }                                                                              \
    } while (0)

/* Integer equality; values print signed, so negative errnos read as such. */
#define CHECK_EQ(a, b)                                                                 \
    do {                                                                               \
        unsigned long long va_ = (unsigned long long)(a), vb_ = (unsigned long long)(b); \
        if (va_ != vb_) {                                                              \
            fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__,      \
                    __LINE__, #a, (long long)va_, #b, (long long)vb_);                 \
            failures++;                                                                \
        }                                                                              \
    } while (0)

#define REQUIRE(cond)                                                                  \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#endif /* PT_TESTS_CHECK_H */
