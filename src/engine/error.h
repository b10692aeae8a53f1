#pragma once
// One exception type for every user-facing failure: config errors, bad checkpoints, non-finite losses.
// The CLI catches it and prints what() without a stack of context, so messages must stand on their own.
#include <stdexcept>
#include <string>

namespace canonlab {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#define CANONLAB_CHECK(cond, msg)                                                                    \
  do {                                                                                               \
    if (!(cond)) throw ::canonlab::Error(std::string(msg));                                          \
  } while (0)

}  // namespace canonlab
