#pragma once
// Shared pieces of the GPU tests (namespace canonlab::test): the skip where there is no device, device copies of
// host vectors, bf16 rounding for references, bit-for-bit comparison, and the tolerances every file uses.
//
// Tolerances (|got − want| <= atol + rtol·|want|, the rule of compare() in gradcheck.h), by what is compared:
//   kExact          copies, gathers, sign, key shift, embedding backward: the same float operations in the same
//                   order as the CPU, so the same bits (rtol = atol = 0)
//   kElementwise    fp32 elementwise math (exp, erfc, sigmoid) against the CPU's own polynomial versions: a few ulp
//   kReduction      fp32 sums and products over up to a few thousand terms (norms, GEMMs, attention, conv)
//                   against references that accumulate in double: fp32 rounding of the running sums
//                   (reduction_over(K) widens atol for fp32 sums of K > 256 terms done in fp32 all along, as in
//                   the GEMMs: the rounding of the running sum grows about linearly with K)
//   kBf16Exact      bf16 GEMMs against a double reference on the same bf16-rounded inputs: products of bf16 values
//                   are exact in fp32, so only fp32 accumulation remains, as in kReduction
//   kBf16VsFp32     bf16 GEMMs against the fp32 reference on unrounded inputs: bf16 keeps 8 significant bits
//                   (relative rounding 2^-9 per input), i.e. what train.precision=bf16 costs
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/cuda/buffer.h"
#include "engine/cuda/runtime.h"
#include "engine/cuda/types.h"
#include "gradcheck.h"

namespace canonlab::test {

struct Tolerance {
  double rtol, atol;
};
constexpr Tolerance kExact{0, 0};
constexpr Tolerance kElementwise{1e-5, 1e-6};
constexpr Tolerance kReduction{2e-4, 2e-5};
constexpr Tolerance kBf16Exact{2e-4, 2e-5};
constexpr Tolerance kBf16VsFp32{1e-2, 1e-2};  // atol scaled by sqrt(K) where it applies

inline Tolerance reduction_over(size_t K) {
  return {kReduction.rtol, kReduction.atol * (K > 256 ? double(K) / 256.0 : 1.0)};
}

// Every GPU test derives from GpuTest: without a device it is skipped, not failed, and says why.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::no_device_reason();
    stream_ = std::make_unique<cuda::Stream>();
  }
  cuda::CudaStream stream() const { return stream_->get(); }
  void sync() const { stream_->synchronize(); }

 private:
  std::unique_ptr<cuda::Stream> stream_;
};
template <class P>
class GpuTestWithParam : public GpuTest, public ::testing::WithParamInterface<P> {};

template <class T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& host) {
  return cuda::DeviceBuffer<T>(std::span<const T>(host));
}

// A device buffer of n floats filled with NaN: outputs start poisoned, so an entry a kernel should write and did
// not fails every comparison.
inline cuda::DeviceBuffer<float> poisoned(size_t n) {
  cuda::DeviceBuffer<float> b(n);
  b.fill_bytes(0xff);
  return b;
}

// Round to the nearest bf16, ties to even (what __float2bfloat16_rn does), kept as a float.
inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) {  // inf, NaN: truncate (keeps NaN a NaN)
    u &= 0xffff0000u;
    if (x != x) u |= 0x00400000u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  }
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
inline std::vector<float> rounded_bf16(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}
inline std::vector<cuda::Bf16> to_bf16_bits(const std::vector<float>& v) {
  std::vector<cuda::Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    const float r = round_bf16(v[i]);
    uint32_t u;
    std::memcpy(&u, &r, 4);
    out[i] = cuda::Bf16(uint16_t(u >> 16));
  }
  return out;
}

inline CompareResult compare_with(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol) {
  EXPECT_EQ(got.size(), want.size());
  return compare(got.data(), want.data(), std::min(got.size(), want.size()), tol.rtol, tol.atol);
}

// Bit-for-bit equality (NaNs with the same payload count as equal), with the first differing index.
inline ::testing::AssertionResult bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); i++)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "first difference at " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

}  // namespace canonlab::test
