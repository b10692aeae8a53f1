#pragma once
// Every kernel's training (fast) version. The naive references live beside them in <op>/naive.h and are
// only included by tests and benchmarks.
#include "engine/ops/activation/activation.h"
#include "engine/ops/attention/fast.h"
#include "engine/ops/canon_conv/fast.h"
#include "engine/ops/cross_entropy/cross_entropy.h"
#include "engine/ops/embedding/fast.h"
#include "engine/ops/linear/fast.h"
#include "engine/ops/norm/fast.h"
#include "engine/ops/rope/rope.h"
