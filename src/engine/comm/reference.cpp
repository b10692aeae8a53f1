#include "engine/comm/communicator.h"

#include <cstdio>
#include <cstdlib>

#include "engine/error.h"

namespace canonlab {

void SingleProcess::abort(int exit_code) {
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

std::vector<float> sum_in_rank_order_reference(const std::vector<std::vector<float>>& contributions) {
  CANONLAB_CHECK(!contributions.empty(), "sum_in_rank_order_reference: no rank");
  std::vector<float> sum = contributions[0];
  for (size_t r = 1; r < contributions.size(); r++) {
    CANONLAB_CHECK(contributions[r].size() == sum.size(), "sum_in_rank_order_reference: ranks hold different sizes");
    for (size_t i = 0; i < sum.size(); i++) sum[i] = sum[i] + contributions[r][i];
  }
  return sum;
}

}  // namespace canonlab
