// Broken invariants abort with the expression and file:line; they are bugs, not user errors.
#pragma once

#include <cstdio>
#include <cstdlib>

#define DF_CHECK(cond)                                                                          \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "diskformer: internal check failed: %s at %s:%d\n", #cond, __FILE__, \
                   __LINE__);                                                                   \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

#define DF_CHECK_MSG(cond, msg)                                                                      \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "diskformer: internal check failed: %s (%s) at %s:%d\n", #cond, msg,      \
                   __FILE__, __LINE__);                                                              \
      std::abort();                                                                                  \
    }                                                                                                \
  } while (0)
