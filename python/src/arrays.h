#pragma once
// NumPy arrays that own a std::vector's buffer (no copy when returned), and token batches read from NumPy.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/error.h"

namespace canonlab::python {

namespace nb = nanobind;

// The vector moves into a capsule that the array keeps alive: Python frees it with the last reference.
template <class T>
nb::ndarray<nb::numpy, T> owned_array(std::vector<T>&& data, std::vector<size_t> shape) {
  auto holder = std::make_unique<std::vector<T>>(std::move(data));
  T* ptr = holder->data();
  nb::capsule owner(holder.get(), [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  holder.release();  // the capsule owns it now
  return nb::ndarray<nb::numpy, T>(ptr, shape.size(), shape.data(), owner);
}

using TokenArray = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

// tokens (B, T) as the engine's int ids, each checked against the vocabulary.
inline std::vector<int> token_ids(const TokenArray& tokens, int vocab) {
  const size_t B = tokens.shape(0), T = tokens.shape(1);
  CANONLAB_CHECK(B >= 1 && T >= 1, "tokens: shape (" + std::to_string(B) + ", " + std::to_string(T) +
                                       "); expected (batch, time) with both at least 1");
  std::vector<int> ids(B * T);
  const int64_t* data = tokens.data();
  for (size_t i = 0; i < ids.size(); i++) {
    CANONLAB_CHECK(data[i] >= 0 && data[i] < vocab, "tokens[" + std::to_string(i / T) + ", " + std::to_string(i % T) +
                                                        "] = " + std::to_string(data[i]) +
                                                        " is outside the model's vocabulary [0, " +
                                                        std::to_string(vocab) + ")");
    ids[i] = int(data[i]);
  }
  return ids;
}

}  // namespace canonlab::python
