// canonlab._core: the C++ engine under the Python package (python/canonlab/). Thin on purpose: the package's
// Python files shape the API (DataFrames, torch tensors); this module loads, runs and trains models and turns
// canonlab::Error into canonlab.Error with the CLI's message. Long calls release the GIL.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "engine/error.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "canonlab's C++ engine (use the canonlab package, which wraps it)";
  // The CLI prints "error: <message>" and exits 2 for these; Python gets the same message as canonlab.Error.
  nb::exception<canonlab::Error>(m, "Error", PyExc_ValueError);
  canonlab::python::bind_model(m);
  canonlab::python::bind_train(m);
  canonlab::python::bind_report(m);
}
