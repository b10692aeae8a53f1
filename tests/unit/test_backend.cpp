// The backend seam (engine/backend/): the CPU backend forwards to the kernels unchanged, bf16 rounding and the bf16
// GEMM wiring against a reference computed here, train.device parsing and the CUDA refusal, and the parameter
// store's device buffers (host copies, the bf16 shadow).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/task.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/make_backend.h"
#include "engine/ops/linear/bf16.h"
#include "engine/ops/linear/fast.h"
#include "gradcheck.h"
#include "models/language_model.h"

namespace canonlab {
namespace {

using test::random_vector;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(Bf16, RoundsToNearestWithTiesToEven) {
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(-2.5f), -2.5f);                       // representable: unchanged
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);               // halfway, 1 is even: down
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);  // halfway, 1 + 2^-7 is odd: up
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);  // above halfway: up
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f - 0x1p-20f), 1.0f);            // below halfway: down
  EXPECT_EQ(std::bit_cast<uint32_t>(round_to_bf16(-0.0f)), 0x80000000u);  // the sign of zero survives
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());  // overflows
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(0x7f800001u))));  // a NaN whose payload would round to infinity
  EXPECT_EQ(round_to_bf16(from_bits(0x00012345u)), from_bits(0x00010000u));  // subnormals round like the rest
  // Every result is a bf16 value: its low 16 bits are zero.
  for (float x : random_vector<float>(1000, 1, -1e3, 1e3))
    EXPECT_EQ(std::bit_cast<uint32_t>(round_to_bf16(x)) & 0xffffu, 0u) << x;
  // the backend's op (the bf16 shadow of the weights) rounds each value the same way
  std::vector<float> v = {1.0f + 0x1p-8f, 3.0f}, out(2);
  CpuBackend<float>(Precision::bf16).round_to_bf16(out.data(), v.data(), v.size());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 3.0f);
}

// y = bf16(x) w^T + b in double: the exact products of the rounded operands, the sum in double.
std::vector<double> bf16_reference_forward(const std::vector<float>& x, int ldx, const std::vector<float>& w,
                                           const float* b, int N, int IN, int OUT) {
  std::vector<double> y(size_t(N) * OUT);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OUT; o++) {
      double acc = b ? double(b[o]) : 0.0;
      for (int i = 0; i < IN; i++)
        acc += double(round_to_bf16(x[size_t(n) * ldx + i])) * double(w[size_t(o) * IN + i]);
      y[size_t(n) * OUT + o] = acc;
    }
  return y;
}

double max_relative_gap(const float* got, int ld, const std::vector<double>& want, int N, int W) {
  double worst = 0, scale = 0;
  for (int n = 0; n < N; n++)
    for (int c = 0; c < W; c++) {
      worst = std::max(worst, std::abs(double(got[size_t(n) * ld + c]) - want[size_t(n) * W + c]));
      scale = std::max(scale, std::abs(want[size_t(n) * W + c]));
    }
  return worst / scale;
}

struct GemmShape {
  int N, IN, OUT, pad;
  bool bias;
};

// Odd sizes and row strides wider than the rows (the q|k|v column blocks): fp32 accumulation of exact bf16
// products stays within 1e-5 of the double sum, while skipping the rounding of x is off by about 1e-3.
TEST(Bf16, LinearForwardAndBackwardMatchTheRoundedReference) {
  for (const GemmShape s : {GemmShape{37, 19, 23, 5, true}, GemmShape{64, 128, 384, 0, false},
                            GemmShape{3, 1, 7, 2, true}, GemmShape{129, 65, 33, 3, false}}) {
    SCOPED_TRACE("N=" + std::to_string(s.N) + " IN=" + std::to_string(s.IN) + " OUT=" + std::to_string(s.OUT));
    const int ldx = s.IN + s.pad, ldy = s.OUT + s.pad;
    const std::vector<float> x = random_vector<float>(size_t(s.N) * ldx, 1);
    std::vector<float> w = random_vector<float>(size_t(s.OUT) * s.IN, 2);
    for (float& v : w) v = round_to_bf16(v);  // the shadow weights
    const std::vector<float> b = random_vector<float>(s.OUT, 3);
    const float* bp = s.bias ? b.data() : nullptr;

    Bf16Gemm g;
    std::vector<float> y(size_t(s.N) * ldy, 7.f);
    linear_forward_bf16(g, y.data(), ldy, x.data(), ldx, w.data(), bp, s.N, s.IN, s.OUT);
    EXPECT_LT(max_relative_gap(y.data(), ldy, bf16_reference_forward(x, ldx, w, bp, s.N, s.IN, s.OUT), s.N, s.OUT),
              1e-5);
    for (int n = 0; n < s.N; n++)
      for (int o = s.OUT; o < ldy; o++) ASSERT_EQ(y[size_t(n) * ldy + o], 7.f) << "the padding was written";
    std::vector<float> y32(size_t(s.N) * ldy);
    linear_forward(y32.data(), ldy, x.data(), ldx, w.data(), bp, s.N, s.IN, s.OUT);
    if (s.IN > 1) {
      EXPECT_FALSE(same_bits(y, y32)) << "the activations were not rounded";
    }

    // backward: dx = bf16(dy) w, dw += bf16(dy)^T bf16(x), db += sum dy in fp32
    const std::vector<float> dy = random_vector<float>(size_t(s.N) * ldy, 4);
    std::vector<float> dx(size_t(s.N) * ldx, 7.f), dw = random_vector<float>(w.size(), 5), db = random_vector<float>(s.OUT, 6);
    const std::vector<float> dw0 = dw, db0 = db;
    linear_backward_bf16(g, dx.data(), ldx, dw.data(), s.bias ? db.data() : nullptr, dy.data(), ldy, x.data(), ldx,
                         w.data(), s.N, s.IN, s.OUT);
    std::vector<double> dx_ref(size_t(s.N) * s.IN), dw_ref(w.size()), db_ref(s.OUT);
    for (int n = 0; n < s.N; n++)
      for (int o = 0; o < s.OUT; o++) {
        const double g = round_to_bf16(dy[size_t(n) * ldy + o]);
        db_ref[o] += dy[size_t(n) * ldy + o];
        for (int i = 0; i < s.IN; i++) {
          dx_ref[size_t(n) * s.IN + i] += g * w[size_t(o) * s.IN + i];
          dw_ref[size_t(o) * s.IN + i] += g * round_to_bf16(x[size_t(n) * ldx + i]);
        }
      }
    EXPECT_LT(max_relative_gap(dx.data(), ldx, dx_ref, s.N, s.IN), 1e-5);
    for (int n = 0; n < s.N; n++)
      for (int i = s.IN; i < ldx; i++) ASSERT_EQ(dx[size_t(n) * ldx + i], 7.f) << "the padding was written";
    std::vector<float> dw_added(dw.size());
    for (size_t i = 0; i < dw.size(); i++) dw_added[i] = dw[i] - dw0[i];
    EXPECT_LT(max_relative_gap(dw_added.data(), s.IN, dw_ref, s.OUT, s.IN), 1e-4);
    if (s.bias) {
      std::vector<float> db_added(s.OUT);
      for (int o = 0; o < s.OUT; o++) db_added[o] = db[o] - db0[o];
      EXPECT_LT(max_relative_gap(db_added.data(), s.OUT, db_ref, 1, s.OUT), 1e-5);
    }
  }
}

// The backend picks the GEMM by precision: fp32 is linear_forward itself (bit for bit), bf16 the bf16 GEMM.
TEST(Backend, CpuLinearIsTheKernelOfItsPrecision) {
  const int N = 21, IN = 17, OUT = 9;
  const std::vector<float> x = random_vector<float>(size_t(N) * IN, 1), w = random_vector<float>(size_t(OUT) * IN, 2);
  const std::vector<float> b = random_vector<float>(OUT, 3), dy = random_vector<float>(size_t(N) * OUT, 4);
  Bf16Gemm g;
  auto forward = [&](Backend<float>* backend, bool bf16) {
    std::vector<float> y(size_t(N) * OUT);
    if (backend) backend->linear_forward(y.data(), OUT, x.data(), IN, w.data(), b.data(), N, IN, OUT);
    else if (bf16) linear_forward_bf16(g, y.data(), OUT, x.data(), IN, w.data(), b.data(), N, IN, OUT);
    else linear_forward(y.data(), OUT, x.data(), IN, w.data(), b.data(), N, IN, OUT);
    return y;
  };
  auto backward = [&](Backend<float>* backend, bool bf16) {
    std::vector<float> grads(size_t(N) * IN + size_t(OUT) * IN + OUT, 0.f);
    float *dx = grads.data(), *dw = dx + size_t(N) * IN, *db = dw + size_t(OUT) * IN;
    if (backend) backend->linear_backward(dx, IN, dw, db, dy.data(), OUT, x.data(), IN, w.data(), N, IN, OUT);
    else if (bf16) linear_backward_bf16(g, dx, IN, dw, db, dy.data(), OUT, x.data(), IN, w.data(), N, IN, OUT);
    else linear_backward(dx, IN, dw, db, dy.data(), OUT, x.data(), IN, w.data(), N, IN, OUT);
    return grads;
  };
  CpuBackend<float> fp32, bf16(Precision::bf16);
  EXPECT_TRUE(same_bits(forward(&fp32, false), forward(nullptr, false)));
  EXPECT_TRUE(same_bits(backward(&fp32, false), backward(nullptr, false)));
  EXPECT_TRUE(same_bits(forward(&bf16, true), forward(nullptr, true)));
  EXPECT_TRUE(same_bits(backward(&bf16, true), backward(nullptr, true)));
  EXPECT_FALSE(same_bits(forward(&bf16, true), forward(nullptr, false)));
  EXPECT_THROW(CpuBackend<double>(Precision::bf16), Error);
}

// The elementwise ops that replaced the modules' own loops compute what those loops did.
TEST(Backend, ElementwiseOpsDoWhatTheModulesLoopsDid) {
  CpuBackend<float> be;
  const int B = 3, Tn = 7, C = 5, o = 2;
  const size_t n = size_t(B) * Tn * C;
  const std::vector<float> x = random_vector<float>(n, 1), y = random_vector<float>(n, 2);
  std::vector<float> out(n), want(n);
  be.add(out.data(), x.data(), y.data(), n);
  for (size_t i = 0; i < n; i++) want[i] = x[i] + y[i];
  EXPECT_TRUE(same_bits(out, want));
  be.shift_add_forward(out.data(), x.data(), B, Tn, C, o);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++)
      for (int c = 0; c < C; c++) {
        const size_t i = (size_t(b) * Tn + t) * C + c;
        want[i] = t >= o ? x[i] + x[i - size_t(o) * C] : x[i];
      }
  EXPECT_TRUE(same_bits(out, want));
  out = y, want = y;
  be.shift_add_backward(out.data(), x.data(), B, Tn, C, o);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++)
      for (int c = 0; c < C; c++) {
        const size_t i = (size_t(b) * Tn + t) * C + c;
        want[i] += x[i];
        if (t + o < Tn) want[i] += x[i + size_t(o) * C];
      }
  EXPECT_TRUE(same_bits(out, want));
  // learned positions: forward adds pe[t]; backward sums over the batch in batch order
  const std::vector<float> pe = random_vector<float>(size_t(Tn) * C, 3);
  out = x, want = x;
  be.add_positions(out.data(), pe.data(), B, Tn, C);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++)
      for (int c = 0; c < C; c++) want[(size_t(b) * Tn + t) * C + c] += pe[size_t(t) * C + c];
  EXPECT_TRUE(same_bits(out, want));
  std::vector<float> dpe = pe, dpe_want = pe;
  be.add_positions_backward(dpe.data(), x.data(), B, Tn, C);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++)
      for (int c = 0; c < C; c++) dpe_want[size_t(t) * C + c] += x[(size_t(b) * Tn + t) * C + c];
  EXPECT_TRUE(same_bits(dpe, dpe_want));
  // a column block of rows of stride 7 into rows of stride 4
  std::vector<float> dst(4 * 6, -1.f);
  be.copy_rows(dst.data() + 1, 4, x.data() + 2, 7, 6, 3);
  for (int r = 0; r < 6; r++) {
    EXPECT_EQ(dst[size_t(r) * 4], -1.f);
    for (int c = 0; c < 3; c++) EXPECT_EQ(dst[size_t(r) * 4 + 1 + c], x[size_t(r) * 7 + 2 + c]);
  }
  EXPECT_EQ(be.first_non_finite(x.data(), n), n);
  std::vector<float> bad = x;
  bad[17] = std::numeric_limits<float>::infinity();
  bad[40] = std::nanf("");
  EXPECT_EQ(be.first_non_finite(bad.data(), n), 17u);
  double ss = 0;
  for (float v : x) ss += double(v) * double(v);
  double sumsq = -1;
  be.grad_sum_squares(x.data(), n, &sumsq);
  EXPECT_EQ(sumsq, ss);
}

TEST(Device, TrainDeviceAcceptsCpuCudaAndCudaN) {
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:7", "cuda:1023"}) EXPECT_TRUE(parse_device(ok)) << ok;
  EXPECT_EQ(parse_device("cuda:7")->index, 7);
  EXPECT_EQ(parse_device("cuda")->device, Device::cuda);
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", " cuda", "cuda:1024", "cuda:01",
                          "cuda:0:1"})
    EXPECT_FALSE(parse_device(bad)) << "'" << bad << "'";
  try {
    config_from_yaml_string("{}", {"train.device=gpu"});
    FAIL() << "train.device=gpu was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.device: 'gpu' is not allowed; allowed: cpu, cuda, cuda:N"),
              std::string::npos)
        << e.what();
  }
  try {
    config_from_yaml_string("{}", {"train.precision=fp16"});
    FAIL() << "train.precision=fp16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.precision"), std::string::npos) << e.what();
  }
}

// Without a GPU (this machine), or without the CUDA backend (a build without nvcc), a cuda device is a valid config
// value that cannot run here: refused naming the key, the value and why.
TEST(Device, CudaIsRefusedNamingWhatThisBuildLacks) {
  const RunConfig cfg = config_from_yaml_string("{}", {"train.device=cuda:1", "task.n_symbols=4", "model.d_model=16",
                                                      "model.n_heads=2", "model.n_layers=1"});
  EXPECT_EQ(cfg.train.device, "cuda:1");
  try {
    build_model(cfg);
    FAIL() << "a model was built on cuda:1";
  } catch (const Error& e) {
    const std::string m = e.what();
    const bool named = built_with_cuda() ? m.find("train.device: 'cuda:1' needs a GPU; this machine has no CUDA "
                                                  "device") != std::string::npos ||
                                               m.find("train.device: 'cuda:1' names a GPU this machine lacks") !=
                                                   std::string::npos
                                         : m.find("train.device: 'cuda:1' needs canonlab built with the CUDA backend "
                                                  "and a GPU; this build has no CUDA backend") != std::string::npos;
    EXPECT_TRUE(named) << m;
    EXPECT_NE(std::string(e.what()).find("(allowed here: cpu)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(build_model(config_from_yaml_string("{}", {"task.n_symbols=4", "model.d_model=16", "model.n_heads=2",
                                                       "model.n_layers=1"}))
                ->backend()
                .name(),
            "cpu");
}

RunConfig tiny_run(const std::vector<std::string>& extra) {
  std::vector<std::string> sets = {"model.d_model=16", "model.n_heads=2", "model.n_layers=2", "task.vocab=12",
                                   "task.n_symbols=5", "train.batch_size=4", "model.canon.set=ABCD"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return config_from_yaml_string("{}", sets);
}

// The one buffer class of every device (engine/backend/memory.h), on host memory: copies both ways, fills, an
// upload larger than the buffer refused with both sizes named, moves that leave the source empty.
TEST(DeviceBuffer, CopiesFillsRefusesOversizedUploadsAndMoves) {
  DeviceBuffer<float> b(host_memory(), 5);
  b.upload(std::vector<float>{1, 2, 3});
  EXPECT_EQ(b.download()[2], 3.f);
  b.fill_zero();
  EXPECT_EQ(b.download(), std::vector<float>(5, 0.f));
  b.fill_bytes(0xff);
  for (float v : b.download()) EXPECT_TRUE(std::isnan(v));
  try {
    b.upload(std::vector<float>(6, 1.f));
    ADD_FAILURE() << "an upload of 6 elements into a buffer of 5 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 elements into a buffer of 5"), std::string::npos) << e.what();
  }
  DeviceBuffer<float> moved(std::move(b));
  EXPECT_EQ(moved.size(), 5u);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is part of the contract
  EXPECT_EQ(&moved.memory(), &host_memory());
}

TEST(ParameterStore, HostCopiesRoundTripAndInitIsTheSameOnEveryPath) {
  const RunConfig cfg = tiny_run({"model.family=mamba2", "model.mamba2.init=mimetic", "model.canon.set=b"});
  auto a = build_model(cfg);
  auto b = build_model<float>(cfg.model, cfg.train.seed, std::make_shared<CpuBackend<float>>(Precision::bf16));
  const std::vector<float> va = a->params().host_values(), vb = b->params().host_values();
  EXPECT_TRUE(same_bits(va, vb)) << "the precision changed the initial weights";
  std::vector<float> changed = va;
  for (float& v : changed) v *= 0.5f;
  a->params().set_values(changed);
  EXPECT_TRUE(same_bits(a->params().host_values(), changed));
  EXPECT_EQ(a->params().host_grads(), std::vector<float>(va.size(), 0.f));
  EXPECT_THROW(a->params().set_values(std::vector<float>(3)), Error);
  EXPECT_FALSE(a->params().has_gemm_shadow());
  EXPECT_TRUE(b->params().has_gemm_shadow());
}

// bf16: the forward pass rounds the current weights into the shadow, so weights written since the last pass
// (an optimizer step, a checkpoint load, a finite-difference nudge) are what the GEMMs see.
TEST(ParameterStore, Bf16ShadowFollowsTheMasterWeights) {
  const RunConfig cfg = tiny_run({});
  auto bf16 = [&](uint64_t seed) {
    return build_model<float>(cfg.model, seed, std::make_shared<CpuBackend<float>>(Precision::bf16));
  };
  auto logits = [&](LanguageModel<float>& m) {
    const Batch batch = make_task(cfg.task)->make_batch(cfg.train.batch_size, 3, 0);
    Arena arena;
    StepContext<float> ctx{arena, m.backend()};
    const float* l = m.forward(ctx, ctx.upload(std::span<const int>(batch.tokens)), batch.B, batch.T);
    return std::vector<float>(l, l + size_t(batch.B) * batch.T * m.vocab_size());
  };
  auto a = bf16(1), b = bf16(2);
  const std::vector<float> la = logits(*a);
  EXPECT_FALSE(same_bits(la, logits(*b)));
  b->params().set_values(a->params().host_values());
  EXPECT_TRUE(same_bits(la, logits(*b))) << "the shadow kept the old weights";
  std::vector<float> want(b->params().total());
  for (size_t i = 0; i < want.size(); i++) want[i] = round_to_bf16(b->params().values()[i]);
  const std::span<float> shadow = b->params().gemm_shadow();
  EXPECT_TRUE(same_bits(std::vector<float>(shadow.begin(), shadow.end()), want));
  // and bf16 is not fp32: the same weights give different (but close) logits
  auto fp32 = build_model<float>(cfg.model, 1);
  const std::vector<float> l32 = logits(*fp32);
  EXPECT_FALSE(same_bits(la, l32));
  double worst = 0;
  for (size_t i = 0; i < la.size(); i++) worst = std::max(worst, double(std::abs(la[i] - l32[i])));
  EXPECT_LT(worst, 0.05);
}

}  // namespace
}  // namespace canonlab
