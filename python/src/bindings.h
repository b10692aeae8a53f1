#pragma once
// The parts of canonlab._core, one file each (python/src/).
#include <nanobind/nanobind.h>

namespace canonlab::python {

namespace nb = nanobind;

void bind_model(nanobind::module_& m);   // model.cpp: Model (load, forward, attention, hidden states, generate)
void bind_train(nanobind::module_& m);   // train.cpp: train, resolve_config, dry_run
void bind_report(nanobind::module_& m);  // report.cpp: a sweep's runs, the report's plan and paired test

}  // namespace canonlab::python
