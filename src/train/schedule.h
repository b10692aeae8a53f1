#pragma once
// Learning rate at update s (0-based): linear warmup over warmup_steps, then cosine to a floor
// (lr * min_lr_frac), linear to zero, or constant.
#include <algorithm>
#include <cmath>

#include "config/run_config.h"

namespace canonlab {

inline double learning_rate(const TrainConfig& c, int s) {
  if (s < c.warmup_steps) return c.lr * double(s + 1) / double(c.warmup_steps);
  const double p = double(s - c.warmup_steps) / double(std::max(1, c.steps - c.warmup_steps));
  if (c.schedule == "cosine") return c.lr * (c.min_lr_frac + (1.0 - c.min_lr_frac) * 0.5 * (1.0 + std::cos(M_PI * p)));
  if (c.schedule == "linear") return c.lr * (1.0 - p);
  return c.lr;
}

}  // namespace canonlab
