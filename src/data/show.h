#pragma once
// Human-readable windows for `canonlab data show`: tokens decoded by the task, the loss mask marked.
#include <string>

#include "data/task.h"

namespace canonlab {

// Row `row` of `batch`, wrapped at `width` columns, at most `max_tokens` tokens (0 = all). A token whose
// prediction is trained on is written [tok]; one that is also scored {tok}. Where the target is not the next input
// token (MQAR), the target follows the input: tok{->target}.
std::string show_window(const Task& task, const Batch& batch, int row, int width, int max_tokens);

}  // namespace canonlab
