// ops.cpp: the native kernel of torch.ops.godist.all_reduce_ for CPU
// tensors, built and loaded by godist/_native.py on the op's first call.
//
// It takes the common case straight from torch's dispatcher to the
// library's entry point godist_allreduce, with no Python: a dense,
// contiguous CPU tensor of a dtype godist reduces, a reduce op named in the
// op table (no PREMUL_SUM), a group bound in the group table, no profiler
// running, in the process that loaded the library. It fills this thread's
// godist_op block as godist/_fast.py's allreduce does (synchronous: flags
// 0) and returns when Go completed the op during the call. Every other case
// goes through the Python kernel, op godist::_all_reduce_py_ (ops.py), and
// an error or a work handle (Go queued the op behind asynchronous ones)
// through godist::_native_finish, which raises the same exceptions as the
// Python fast path and runs the group's failure listeners.
//
// Python fills the tables through the _native_* ops defined here: the
// entry point's address and the error buffer's size, the dtype and reduce
// op codes, and the groups. A group is bound by the name the op is called
// with (torch's group name; "" for the default group) to its godist handle
// and timeout, with a weak pointer to the ProcessGroup its registry name
// resolved to at binding: each call resolves the name again and uses the
// entry only if it is still that same object (a group destroyed and
// another created under the same name drops it). Python unbinds a handle
// whenever the group's fast path stops applying (hooks, flight recorder,
// reconfigure, coalescing, set_timeout, close, abort).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/intrusive_ptr.h>
#include <pthread.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/library.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "godist.h"

namespace {

using allreduce_fn = int (*)(godist_op*);

constexpr int kOK = 0;  // godist's status OK (godist/_errors.py)

std::atomic<allreduce_fn> g_allreduce{nullptr};
std::atomic<int64_t> g_errlen{0};
// Set in a child forked from this process: the Go runtime does not run
// there (godist/_lib.py refuses it the same way).
std::atomic<bool> g_forked{false};
// What became of the calls (tests read them: _native_counts): completed
// here, handed to _native_finish, handed to the Python kernel.
std::atomic<int64_t> g_done{0}, g_finished{0}, g_fallbacks{0};

// dtype code by ScalarType; -1: not godist's.
constexpr size_t kTypes = static_cast<size_t>(c10::ScalarType::NumOptions);
std::atomic<int32_t> g_dtype[kTypes];

struct OpName {
  std::string name;  // lower case
  int32_t code;
};

struct Bound {
  std::string key;   // the group name the op is called with ("": the default group)
  std::string name;  // the name the group registry knows it by
  uint64_t handle;   // godist's process group handle
  int64_t timeout_ms;
  c10::weak_intrusive_ptr<c10d::ProcessGroup> pg;  // what name resolved to when bound
};

std::mutex g_mu;  // guards g_ops and g_groups
std::vector<OpName> g_ops;
std::vector<Bound> g_groups;

void after_fork_in_child() { g_forked.store(true, std::memory_order_relaxed); }

struct Init {
  Init() {
    for (auto& d : g_dtype) d.store(-1, std::memory_order_relaxed);
    pthread_atfork(nullptr, nullptr, after_fork_in_child);
  }
} g_init;

// This thread's op block and error buffer.
struct Block {
  godist_op op{};
  std::unique_ptr<char[]> err;
  int64_t errlen = 0;
};

thread_local Block t_block;

godist_op* block(int64_t errlen) {
  Block& b = t_block;
  if (b.errlen != errlen) {
    b.err.reset(new char[errlen]());
    b.errlen = errlen;
  }
  std::memset(&b.op, 0, sizeof(b.op));
  b.op.errbuf = b.err.get();
  b.op.errlen = static_cast<int32_t>(errlen);
  return &b.op;
}

// The reduce op's code for a name (any case), -1 if not in the table.
// Called with g_mu held.
int32_t op_code(c10::string_view name) {
  char low[16];
  if (name.size() >= sizeof(low)) return -1;
  for (size_t i = 0; i < name.size(); i++) {
    low[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[i])));
  }
  c10::string_view l(low, name.size());
  for (const auto& o : g_ops) {
    if (o.name.size() == l.size() && std::memcmp(o.name.data(), l.data(), l.size()) == 0) return o.code;
  }
  return -1;
}

// The bound group called name, if the registry still resolves its name to
// the same ProcessGroup; a stale entry is dropped. Called with g_mu held.
bool find_group(c10::string_view key, uint64_t* handle, int64_t* timeout_ms) {
  for (size_t i = 0; i < g_groups.size(); i++) {
    Bound& b = g_groups[i];
    if (b.key.size() != key.size() || std::memcmp(b.key.data(), key.data(), key.size()) != 0) continue;
    bool same = false;
    auto held = b.pg.lock();
    if (held) {
      try {
        same = c10d::resolve_process_group(b.name).get() == held.get();
      } catch (const std::exception&) {
        same = false;  // no longer registered
      }
    }
    if (!same) {
      g_groups.erase(g_groups.begin() + static_cast<std::ptrdiff_t>(i));
      return false;
    }
    *handle = b.handle;
    *timeout_ms = b.timeout_ms;
    return true;
  }
  return false;
}

void python_kernel(at::Tensor& t, c10::string_view op, c10::string_view group) {
  g_fallbacks.fetch_add(1, std::memory_order_relaxed);
  static auto fn = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("godist::_all_reduce_py_", "")
                       .typed<void(at::Tensor&, c10::string_view, c10::string_view)>();
  fn.call(t, op, group);
}

void finish(const at::Tensor& t, int64_t rc, uint64_t work, const char* errbuf) {
  g_finished.fetch_add(1, std::memory_order_relaxed);
  static auto fn = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("godist::_native_finish", "")
                       .typed<void(const at::Tensor&, int64_t, int64_t, int64_t)>();
  fn.call(t, rc, static_cast<int64_t>(work), static_cast<int64_t>(reinterpret_cast<intptr_t>(errbuf)));
}

void all_reduce_(at::Tensor& t, c10::string_view op, c10::string_view group) {
  allreduce_fn fn = g_allreduce.load(std::memory_order_acquire);
  if (fn == nullptr || g_forked.load(std::memory_order_relaxed) || t.layout() != c10::kStrided ||
      !t.is_contiguous() || torch::profiler::impl::profilerEnabled()) {
    return python_kernel(t, op, group);
  }
  int32_t dt = g_dtype[static_cast<size_t>(t.scalar_type())].load(std::memory_order_relaxed);
  if (dt < 0) return python_kernel(t, op, group);
  int32_t code;
  uint64_t handle;
  int64_t timeout_ms;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    code = op_code(op);
    if (code < 0 || !find_group(group, &handle, &timeout_ms)) {
      code = -1;
    }
  }
  if (code < 0) return python_kernel(t, op, group);
  godist_op* b = block(g_errlen.load(std::memory_order_relaxed));
  b->pg = handle;
  b->buf.data = t.data_ptr();
  b->buf.nbytes = static_cast<int64_t>(t.nbytes());
  b->timeout_ms = timeout_ms;
  b->flags = 0;
  b->dtype = dt;
  b->reduce_op = code;
  int rc = fn(b);
  if (rc == kOK && b->work == 0) {
    g_done.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  finish(t, rc, b->work, b->errbuf);
}

// ----- the tables, filled by godist/_native.py -----

void native_setup(int64_t fn, int64_t errlen) {
  TORCH_CHECK(errlen > static_cast<int64_t>(sizeof(godist_error)), "godist: _native_setup: errlen ", errlen,
              " is too small");
  g_errlen.store(errlen, std::memory_order_relaxed);
  g_allreduce.store(reinterpret_cast<allreduce_fn>(static_cast<intptr_t>(fn)), std::memory_order_release);
}

void native_dtype(c10::ScalarType type, int64_t code) {
  auto i = static_cast<size_t>(type);
  TORCH_CHECK(i < kTypes, "godist: _native_dtype: no such dtype");
  g_dtype[i].store(static_cast<int32_t>(code), std::memory_order_relaxed);
}

void native_op(c10::string_view name, int64_t code) {
  std::string low(name.data(), name.size());
  for (auto& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto& o : g_ops) {
    if (o.name == low) {
      o.code = static_cast<int32_t>(code);
      return;
    }
  }
  g_ops.push_back({low, static_cast<int32_t>(code)});
}

// Binds key to the group the registry knows as name; false (nothing bound)
// if name resolves to nothing.
bool native_bind(c10::string_view key, c10::string_view name, int64_t handle, int64_t timeout_ms) {
  std::string n(name.data(), name.size());
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  try {
    pg = c10d::resolve_process_group(n);
  } catch (const std::exception&) {
    return false;
  }
  std::string k(key.data(), key.size());
  std::lock_guard<std::mutex> lk(g_mu);
  for (auto& b : g_groups) {
    if (b.key == k) {
      b = Bound{k, n, static_cast<uint64_t>(handle), timeout_ms, c10::weak_intrusive_ptr<c10d::ProcessGroup>(pg)};
      return true;
    }
  }
  g_groups.push_back(Bound{k, n, static_cast<uint64_t>(handle), timeout_ms,
                           c10::weak_intrusive_ptr<c10d::ProcessGroup>(pg)});
  return true;
}

// Drops every binding to the group handle.
void native_unbind_handle(int64_t handle) {
  std::lock_guard<std::mutex> lk(g_mu);
  std::erase_if(g_groups, [&](const Bound& b) { return b.handle == static_cast<uint64_t>(handle); });
}

// The bound keys (tests).
std::vector<std::string> native_bound() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::vector<std::string> out;
  for (const auto& b : g_groups) out.push_back(b.key);
  return out;
}

std::vector<int64_t> native_counts() {
  return {g_done.load(std::memory_order_relaxed), g_finished.load(std::memory_order_relaxed),
          g_fallbacks.load(std::memory_order_relaxed)};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(godist, m) {
  m.def("_native_setup(int fn, int errlen) -> ()", native_setup);
  m.def("_native_dtype(ScalarType dtype, int code) -> ()", native_dtype);
  m.def("_native_op(str name, int code) -> ()", native_op);
  m.def("_native_bind(str key, str name, int handle, int timeout_ms) -> bool", native_bind);
  m.def("_native_unbind_handle(int handle) -> ()", native_unbind_handle);
  m.def("_native_bound() -> str[]", native_bound);
  m.def("_native_counts() -> int[]", native_counts);
}

TORCH_LIBRARY_IMPL(godist, CPU, m) { m.impl("all_reduce_", TORCH_FN(all_reduce_)); }
