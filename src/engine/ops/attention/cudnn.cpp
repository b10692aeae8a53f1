// cuDNN's fused SDPA in bf16 behind cudnn.h: run-time loading of libcudnn.so.9, the per-shape graph cache, the
// workspace layout, and the fp32 <-> bf16 conversions around cuDNN's graphs. Host C++ compiled against the
// header-only cuDNN frontend (pip's nvidia-cudnn-frontend) with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: every cuDNN
// call of the frontend goes through dlsym on cudnn_frontend::cudnn_dlhandle, which this file defines and sets.
// Part of canonlab_cuda when the frontend's headers are found (src/engine/cuda/CMakeLists.txt).

#include "engine/ops/attention/cudnn.h"

#include "engine/cuda/library_search.h"

#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>
#include <glob.h>
#include <link.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "engine/cuda/check.h"
#include "engine/cuda/runtime.h"
#include "engine/error.h"
#include "engine/ops/elementwise/cuda.h"

// The frontend's shim declares this and resolves every cuDNN function in it (dlsym); nothing else defines it. A
// program that compiles the frontend with dynamic loading elsewhere too must keep exactly one definition.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace canonlab::cuda {

namespace {

namespace fe = cudnn_frontend;

constexpr const char* kSoname = "libcudnn.so.9";
constexpr const char* kCudartSoname = "libcudart.so.13";

// ---- loading ------------------------------------------------------------------------------------------------------

struct Loaded {
  std::string error;  // empty once libcudnn is open and cudnn_dlhandle set
  std::string path;   // the libcudnn file
  size_t version = 0;
  std::string cudart_path, cudart_error;  // the shared CUDA runtime the frontend will use (ALiBi needs it)
};

// The file a handle was loaded from (for a soname, the one the loader's search found).
std::string loaded_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  return dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name ? map->l_name : fallback;
}

std::string version_string(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

// Opens `file` (a path or the soname) as cuDNN 9. On success the handle stays open for the life of the process.
bool open_cudnn(const std::string& file, Loaded& out, std::string& why) {
  dlerror();
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    why = e ? e : "dlopen failed";
    return false;
  }
  using GetVersion = size_t (*)();
  auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
  if (get_version == nullptr) {
    why = "has no cudnnGetVersion";
    dlclose(handle);
    return false;
  }
  const size_t v = get_version();
  if (v / 10000 != 9) {
    why = "is cuDNN " + version_string(v) + ", not 9.x";
    dlclose(handle);
    return false;
  }
  out.path = loaded_path(handle, file);
  out.version = v;
  cudnn_frontend::cudnn_dlhandle = handle;
  return true;
}

std::vector<std::string> python_package_dirs(const std::string& subdir) { return python_package_paths(subdir, true); }

// The shared CUDA 13 runtime for the frontend's own runtime calls (cudaMemcpyAsync of the ALiBi slopes, stream
// capture bookkeeping, cuCtxGetCurrent through cudaGetDriverEntryPoint). The frontend dlopens "libcudart.so.12" and
// "libcudart.so.13" by soname, preferring .12, unless CUDNN_FRONTEND_CUDART_LIB_NAME names one: we find a .13 and
// name it there (without overriding a value the user set), and keep it open, so the frontend's dlopen returns it.
void load_cudart(Loaded& out) {
  if (const char* user = std::getenv("CUDNN_FRONTEND_CUDART_LIB_NAME"); user && *user) {
    out.cudart_path = std::string(user) + " ($CUDNN_FRONTEND_CUDART_LIB_NAME)";
    return;
  }
  std::vector<std::string> dirs;
  const std::filesystem::path cudnn_dir = std::filesystem::path(out.path).parent_path();
  dirs.push_back(cudnn_dir);
  dirs.push_back((cudnn_dir / "../../cu13/lib").lexically_normal());           // nvidia-cudnn-cu13 beside the
  dirs.push_back((cudnn_dir / "../../cuda_runtime/lib").lexically_normal());   // runtime wheel's lib
  if (const char* cuda_home = std::getenv("CUDA_HOME"); cuda_home && *cuda_home)
    dirs.push_back(std::string(cuda_home) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  dirs.push_back("");  // the loader's own search, by soname
  std::string searched;
  std::set<std::string> tried;
  for (const std::string& dir : dirs) {
    if (!tried.insert(dir).second) continue;
    const std::string file = dir.empty() ? kCudartSoname : (std::filesystem::path(dir) / kCudartSoname).string();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::exists(file, ec)) continue;
    dlerror();
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      searched += "\n  " + file + " (" + (e ? e : "dlopen failed") + ")";
      continue;
    }
    using GetVersion = cudaError_t (*)(int*);
    auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudaRuntimeGetVersion"));
    int v = 0;
    if (get_version == nullptr || get_version(&v) != cudaSuccess || v / 1000 != 13) {
      searched += "\n  " + file + " (not a CUDA 13 runtime)";
      dlclose(handle);
      continue;
    }
    out.cudart_path = loaded_path(handle, file);
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", out.cudart_path.c_str(), 0);
    return;  // stays open
  }
  out.cudart_error = std::string("no ") + kCudartSoname + " found beside " + out.path + ", in $CUDA_HOME/lib64, " +
                     "/usr/local/cuda/lib64 or on the loader's path" + searched;
}

Loaded load() {
  Loaded lib;
  LibrarySearch search(kSoname, [&](const std::string& file, std::string& why) { return open_cudnn(file, lib, why); });
  const auto found = [&] {
    const char* home = std::getenv("CUDNN_HOME");
    if (!home || !*home) {
      search.try_dir("$CUDNN_HOME/lib (CUDNN_HOME unset)", "");
    } else if (search.try_dir("", std::string(home) + "/lib") || search.try_dir("", std::string(home) + "/lib64")) {
      return true;
    }
    const char* cuda_home = std::getenv("CUDA_HOME");
    if (cuda_home && *cuda_home && search.try_dir("", std::string(cuda_home) + "/lib64")) return true;
    if (search.try_dir("", "/usr/local/cuda/lib64")) return true;
    if (search.try_loader_path()) return true;
    const std::vector<std::string> wheels = python_package_dirs("nvidia/cudnn/lib");
    for (const std::string& dir : wheels)
      if (search.try_dir("", dir)) return true;
    if (wheels.empty())
      search.note("Python's nvidia-cudnn wheels (<prefix>/lib/python3*/{site,dist}-packages/nvidia/cudnn/lib): none");
    return false;
  }();
  if (!found) {
    lib.error = std::string("no ") + kSoname + " found (searched:" + search.searched() +
                ")\nset CUDNN_HOME to the directory above its lib/, or pip install nvidia-cudnn-cu13";
    return lib;
  }
  load_cudart(lib);
  return lib;
}

const Loaded& library() {
  static std::once_flag once;
  static const Loaded* lib = nullptr;  // never destroyed: cached graphs may outlive static destruction order
  std::call_once(once, [] { lib = std::make_unique<Loaded>(load()).release(); });
  return *lib;
}

// ---- graphs -------------------------------------------------------------------------------------------------------

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kScale };

// A window of Tn or more masks nothing: the full-causal path, as in cuda.cu.
int effective_window(int window, int Tn) { return window >= Tn || window < 0 ? 0 : window; }

struct Key {
  int device, B, Tn, H, D;
  bool alibi;
  int window;
  bool backward;
  auto tie() const { return std::tie(device, B, Tn, H, D, alibi, window, backward); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t cudnn_workspace = 0;
  std::string error;  // non-empty: cuDNN cannot run this case (why)
};

struct State {
  std::mutex mutex;
  std::map<int, cudnnHandle_t> handles;  // per device, never destroyed
  std::map<int, int> sm_versions;
  std::map<Key, Plan> plans;
};
State& state() {
  static State* s = new State;  // leaked on purpose, like the handles
  return *s;
}

bool allow_flagged_nondeterministic() {
  const char* v = std::getenv("CANONLAB_CUDNN_ALLOW_NONDETERMINISTIC");
  return v && *v && std::string(v) != "0";
}

std::string message(fe::error_t e) { return e.get_message().empty() ? "(no message)" : e.get_message(); }

// The graph for `key` (forward or backward): tensors and the SDPA node, not yet validated or planned.
std::shared_ptr<fe::graph::Graph> make_graph(const Key& key, int sm) {
  const int64_t b = key.B, h = key.H, t = key.Tn, d = key.D, c = int64_t(key.H) * key.D;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  // The frontend would otherwise ask the shared CUDA runtime which device is current: we know.
  g->set_sm_version(sm);
  // (B, H, Tn, D) views of contiguous (B, Tn, H, D) bf16 rows
  const std::vector<int64_t> dim{b, h, t, d}, stride{t * c, d, c, 1};
  const std::vector<int64_t> stats_dim{b, h, t, 1}, stats_stride{h * t, t, 1, 1};
  auto tensor = [&](const char* name, int64_t uid) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
  };
  auto Q = tensor("Q", kQ), K = tensor("K", kK), V = tensor("V", kV);
  // the scale is a host scalar given at execution: one graph for every scale
  auto scale = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("attn_scale")
                             .set_uid(kScale)
                             .set_dim({1, 1, 1, 1})
                             .set_stride({1, 1, 1, 1})
                             .set_is_pass_by_value(true)
                             .set_data_type(fe::DataType_t::FLOAT));
  if (!key.backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("canonlab_sdpa")
                       .set_generate_stats(true)
                       .set_attn_scale(scale)
                       .set_alibi_mask(key.alibi)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0);  // causal: keys s <= t
    // keys s > t − window ("masks columns at or before row − left_bound")
    if (key.window > 0) options.set_diagonal_band_left_bound(key.window);
    auto [O, stats] = g->sdpa(Q, K, V, options);
    O->set_output(true).set_uid(kO).set_dim(dim).set_stride(stride);
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dim)
        .set_stride(stats_stride);
  } else {
    auto O = tensor("O", kO), dO = tensor("dO", kDO);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("Stats")
                               .set_uid(kStats)
                               .set_dim(stats_dim)
                               .set_stride(stats_stride)
                               .set_data_type(fe::DataType_t::FLOAT));
    auto options = fe::graph::SDPA_backward_attributes()
                       .set_name("canonlab_sdpa_backward")
                       .set_attn_scale(scale)
                       .set_alibi_mask(key.alibi)
                       .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                       .set_diagonal_band_right_bound(0)
                       .set_deterministic_algorithm(true);
    if (key.window > 0) options.set_diagonal_band_left_bound(key.window);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, options);
    dQ->set_output(true).set_uid(kDQ).set_dim(dim).set_stride(stride);
    dK->set_output(true).set_uid(kDK).set_dim(dim).set_stride(stride);
    dV->set_output(true).set_uid(kDV).set_dim(dim).set_stride(stride);
  }
  return g;
}

// Builds one graph (forward or backward) for `key` and its execution plan. "" when it works, else why not.
std::string build(Plan& plan, cudnnHandle_t handle, int sm, const Key& key, bool refuse_nondeterministic) {
  std::shared_ptr<fe::graph::Graph> g = make_graph(key, sm);
  if (auto e = g->validate(); e.is_bad()) return message(e);
  if (auto e = g->build_operation_graph(handle); e.is_bad()) return message(e);
  if (auto e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}); e.is_bad())
    return message(e);
  if (refuse_nondeterministic) g->deselect_numeric_notes({fe::NumericalNote_t::NONDETERMINISTIC});
  if (auto e = g->check_support(); e.is_bad()) return message(e);
  if (auto e = g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); e.is_bad()) return message(e);
  int64_t workspace = 0;
  if (auto e = g->get_workspace_size(workspace); e.is_bad()) return message(e);
  plan.graph = std::move(g);
  plan.cudnn_workspace = workspace < 0 ? 0 : workspace;
  return "";
}

std::string build_caught(Plan& plan, cudnnHandle_t handle, int sm, const Key& key, bool refuse_nondeterministic) {
  try {
    return build(plan, handle, sm, key, refuse_nondeterministic);
  } catch (const std::exception& e) {
    return std::string("the cuDNN frontend threw: ") + e.what();
  }
}

// The plan for `key`, built on first use (st.mutex held). Its error says why cuDNN cannot run the case.
const Plan& plan_for(State& st, const Key& key) {
  if (auto it = st.plans.find(key); it != st.plans.end()) return it->second;
  Plan plan;
  const Loaded& lib = library();
  const std::string cudnn = "cuDNN " + version_string(lib.version);
  const char* what = key.backward ? "backward" : "forward";
  auto h = st.handles.find(key.device);
  if (h == st.handles.end()) {
    cudnnHandle_t handle = nullptr;
    cudnnStatus_t status = CUDNN_STATUS_NOT_INITIALIZED;
    std::string thrown;
    try {
      status = fe::detail::create_handle(&handle);
    } catch (const std::exception& e) {
      thrown = e.what();
    }
    if (status != CUDNN_STATUS_SUCCESS || handle == nullptr) {
      plan.error = cudnn + " (" + lib.path + ") could not create a handle on device " + std::to_string(key.device) +
                   ": " + (thrown.empty() ? std::string(fe::detail::get_error_string(status)) : thrown);
      return st.plans.emplace(key, std::move(plan)).first->second;  // not cached per handle: one try per shape
    }
    h = st.handles.emplace(key.device, handle).first;
  }
  const int sm = st.sm_versions.at(key.device);
  const bool strict = !allow_flagged_nondeterministic();
  std::string why = build_caught(plan, h->second, sm, key, strict);
  if (!why.empty()) {
    plan = Plan{};
    if (strict) {
      // Would it build with the engines cuDNN notes as NONDETERMINISTIC? Then say so: the refusal is ours.
      Plan probe;
      if (build_caught(probe, h->second, sm, key, false).empty())
        why = cudnn + " runs this " + what + " only with engines it notes as NONDETERMINISTIC (set "
              "CANONLAB_CUDNN_ALLOW_NONDETERMINISTIC=1 to use them anyway)";
    }
    plan.error = (key.backward ? "no deterministic backward for this case in " : "no bf16 forward for this case in ") +
                 cudnn + " on sm_" + std::to_string(sm) + ": " + why;
  }
  return st.plans.emplace(key, std::move(plan)).first->second;
}

// Library, device, shape: "" when a graph can be asked for; the key filled in (st.mutex held).
std::string prepare(State& st, Key& key) {
  if (std::string p = cudnn_attention_shape_unsupported(key.B, key.Tn, key.H, key.D); !p.empty()) return p;
  const Loaded& lib = library();
  if (!lib.error.empty()) return lib.error;
  if (device_count() == 0)
    return "no CUDA device (" + no_device_reason() + "); cuDNN " + version_string(lib.version) + " is at " + lib.path;
  CANONLAB_CUDA_CHECK(cudaGetDevice(&key.device));
  if (st.sm_versions.find(key.device) == st.sm_versions.end()) {
    int major = 0, minor = 0;
    CANONLAB_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, key.device));
    CANONLAB_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, key.device));
    st.sm_versions[key.device] = major * 10 + minor;
  }
  if (key.alibi && !lib.cudart_error.empty())
    return "ALiBi through cuDNN needs the shared CUDA runtime for the frontend's slope upload: " + lib.cudart_error;
  return "";
}

Key make_key(int B, int Tn, int H, int D, bool alibi, int window, bool backward) {
  return Key{0, B, Tn, H, D, alibi, effective_window(window, Tn), backward};
}

// The plan for a call (st.mutex held; key.device filled in); throws Error when the case is unsupported.
const Plan& plan_or_throw(State& st, Key& key, const char* caller) {
  if (std::string why = prepare(st, key); !why.empty()) throw Error(std::string(caller) + ": " + why);
  const Plan& plan = plan_for(st, key);
  if (!plan.error.empty()) throw Error(std::string(caller) + ": " + plan.error);
  return plan;
}

// ---- workspace ----------------------------------------------------------------------------------------------------

constexpr size_t kAlign = 256;
size_t round_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Byte offsets of the pieces in the (aligned) workspace.
struct Layout {
  size_t q = 0, k = 0, v = 0, o = 0, dout = 0, dq = 0, dk = 0, dv = 0, stats = 0, cudnn = 0, bytes = 0;
  Layout(int B, int Tn, int H, int D, bool backward, int64_t cudnn_workspace) {
    const size_t bf16 = size_t(B) * Tn * H * D * sizeof(Bf16);
    size_t at = 0;
    auto take = [&](size_t n) {
      const size_t p = at;
      at += round_up(n);
      return p;
    };
    q = take(bf16);
    k = take(bf16);
    v = take(bf16);
    o = take(bf16);
    if (backward) {
      dout = take(bf16);
      dq = take(bf16);
      dk = take(bf16);
      dv = take(bf16);
    }
    stats = take(size_t(B) * H * Tn * sizeof(float));
    cudnn = take(size_t(cudnn_workspace));
    bytes = at + kAlign;  // room to align an arbitrary base pointer
  }
};

char* aligned(void* workspace) {
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(workspace) + kAlign - 1) & ~uintptr_t(kAlign - 1));
}
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Binds the handle to the stream and runs the plan; frontend errors and exceptions become Errors.
void execute(const Plan& plan, cudnnHandle_t handle, CudaStream stream, std::unordered_map<int64_t, void*>& pack,
             void* cudnn_workspace, const char* caller) {
  try {
    const cudnnStatus_t status = fe::detail::set_stream(handle, stream);
    if (status != CUDNN_STATUS_SUCCESS)
      throw Error(std::string(caller) + ": cudnnSetStream failed: " + fe::detail::get_error_string(status));
    fe::error_t e = plan.graph->execute(handle, pack, cudnn_workspace);
    if (e.is_bad()) throw Error(std::string(caller) + ": cuDNN execution failed: " + message(e));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(std::string(caller) + ": the cuDNN frontend threw: " + e.what());
  }
}

}  // namespace

std::string cudnn_attention_unsupported(int B, int Tn, int H, int D, bool alibi, int window) {
  try {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mutex);
    Key key = make_key(B, Tn, H, D, alibi, window, false);
    if (std::string why = prepare(st, key); !why.empty()) return why;
    if (const Plan& p = plan_for(st, key); !p.error.empty()) return p.error;
    key.backward = true;
    if (const Plan& p = plan_for(st, key); !p.error.empty()) return p.error;
    return "";
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown failure while asking cuDNN";
  }
}

size_t cudnn_attention_workspace_bytes(int B, int Tn, int H, int D, bool alibi, int window, bool backward) {
  if (B <= 0 || Tn <= 0 || H <= 0) return 0;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  Key key = make_key(B, Tn, H, D, alibi, window, backward);
  const Plan& plan = plan_or_throw(st, key, "cudnn_attention_workspace_bytes");
  return Layout(B, Tn, H, D, backward, plan.cudnn_workspace).bytes;
}

void cudnn_attention_forward(CudaStream stream, float* out, float* lse, const float* q, const float* k, const float* v,
                             int ld_qkv, bool alibi, int window, int B, int Tn, int H, int D, float scale,
                             void* workspace) {
  if (B <= 0 || Tn <= 0 || H <= 0) return;
  CANONLAB_CHECK(workspace, "cudnn_attention_forward: workspace is null");
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  Key key = make_key(B, Tn, H, D, alibi, window, false);
  const Plan& plan = plan_or_throw(st, key, "cudnn_attention_forward");
  const Layout L(B, Tn, H, D, false, plan.cudnn_workspace);
  char* ws = aligned(workspace);
  const int N = B * Tn, C = H * D;
  auto* q16 = reinterpret_cast<Bf16*>(ws + L.q);
  auto* k16 = reinterpret_cast<Bf16*>(ws + L.k);
  auto* v16 = reinterpret_cast<Bf16*>(ws + L.v);
  auto* o16 = reinterpret_cast<Bf16*>(ws + L.o);
  convert_columns_to_bf16(stream, q16, C, q, ld_qkv, N, C);
  convert_columns_to_bf16(stream, k16, C, k, ld_qkv, N, C);
  convert_columns_to_bf16(stream, v16, C, v, ld_qkv, N, C);
  // cuDNN writes the stats straight into lse when it has the 16-byte alignment the graph declares
  float* stats = aligned16(lse) ? lse : reinterpret_cast<float*>(ws + L.stats);
  std::unordered_map<int64_t, void*> pack{
      {kQ, q16}, {kK, k16}, {kV, v16}, {kO, o16}, {kStats, stats}, {kScale, &scale}};
  execute(plan, st.handles.at(key.device), stream, pack, ws + L.cudnn, "cudnn_attention_forward");
  convert_from_bf16(stream, out, o16, size_t(N) * C);
  if (stats != lse)
    CANONLAB_CUDA_CHECK(cudaMemcpyAsync(lse, stats, size_t(B) * H * Tn * sizeof(float), cudaMemcpyDeviceToDevice,
                                        stream));
}

void cudnn_attention_backward(CudaStream stream, float* dq, float* dk, float* dv, int ld_dqkv, const float* dout,
                              const float* out, const float* lse, const float* q, const float* k, const float* v,
                              int ld_qkv, bool alibi, int window, int B, int Tn, int H, int D, float scale,
                              void* workspace) {
  if (B <= 0 || Tn <= 0 || H <= 0) return;
  CANONLAB_CHECK(workspace, "cudnn_attention_backward: workspace is null");
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  Key key = make_key(B, Tn, H, D, alibi, window, true);
  const Plan& plan = plan_or_throw(st, key, "cudnn_attention_backward");
  const Layout L(B, Tn, H, D, true, plan.cudnn_workspace);
  char* ws = aligned(workspace);
  const int N = B * Tn, C = H * D;
  auto at = [&](size_t offset) { return reinterpret_cast<Bf16*>(ws + offset); };
  convert_columns_to_bf16(stream, at(L.q), C, q, ld_qkv, N, C);
  convert_columns_to_bf16(stream, at(L.k), C, k, ld_qkv, N, C);
  convert_columns_to_bf16(stream, at(L.v), C, v, ld_qkv, N, C);
  convert_to_bf16(stream, at(L.o), out, size_t(N) * C);
  convert_to_bf16(stream, at(L.dout), dout, size_t(N) * C);
  float* stats = const_cast<float*>(lse);  // an input: cuDNN only reads it
  if (!aligned16(lse)) {
    stats = reinterpret_cast<float*>(ws + L.stats);
    CANONLAB_CUDA_CHECK(cudaMemcpyAsync(stats, lse, size_t(B) * H * Tn * sizeof(float), cudaMemcpyDeviceToDevice,
                                        stream));
  }
  std::unordered_map<int64_t, void*> pack{{kQ, at(L.q)},     {kK, at(L.k)},   {kV, at(L.v)},   {kO, at(L.o)},
                                          {kDO, at(L.dout)}, {kStats, stats}, {kDQ, at(L.dq)}, {kDK, at(L.dk)},
                                          {kDV, at(L.dv)},   {kScale, &scale}};
  execute(plan, st.handles.at(key.device), stream, pack, ws + L.cudnn, "cudnn_attention_backward");
  convert_columns_from_bf16(stream, dq, ld_dqkv, at(L.dq), C, N, C);
  convert_columns_from_bf16(stream, dk, ld_dqkv, at(L.dk), C, N, C);
  convert_columns_from_bf16(stream, dv, ld_dqkv, at(L.dv), C, N, C);
}

}  // namespace canonlab::cuda

