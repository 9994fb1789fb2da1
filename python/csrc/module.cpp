// openreg._C: pybind11 glue only. Everything it exposes lives in libopenreg_core.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ATen/ATen.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <vector>

#include "../../core/src/aten/foreach_slices.h"
#include "../../core/src/runtime/runtime.h"
#include "c10d_on_aliases.h"
#include "caller_location.h"

namespace py = pybind11;

namespace {

py::dict engine_stats() {
  py::dict out;
  for (const auto& [op, per_engine] : openreg::route_table().stats()) {
    py::dict d;
    for (const auto& [engine, n] : per_engine) d[py::str(engine)] = n;
    out[py::str(op)] = d;
  }
  return out;
}

py::list engines_found() {
  py::list out;
  for (const auto& f : openreg::discover_engines()) {
    py::dict d;
    d["name"] = f.name;
    d["path"] = f.path;
    out.append(d);
  }
  return out;
}

// The chain's engine of that name; a clear error when the chain has none.
const openreg::Engine* chain_engine(const std::string& name) {
  std::string names;
  for (const auto* e : openreg::registry().chain()) {
    if (e->name == name) return e;
    names += (names.empty() ? "" : ", ") + e->name;
  }
  TORCH_CHECK(false, "openreg: no engine '", name, "' in the chain (", names, ")");
}

py::list engine_chain() {
  py::list out;
  for (const auto* e : openreg::registry().chain()) {
    py::dict d;
    d["name"] = e->name;
    d["version"] = e->version;
    d["path"] = e->path;
    d["abi_version"] = std::to_string(e->table->abi_major) + "." + std::to_string(e->table->abi_minor);
    d["negotiated_minor"] = e->negotiated_minor;
    d["num_ops"] = e->ops.size();
    d["any_op"] = e->any_op();
    // The op table in the engine's order: name -> dtype names ([] = any dtype).
    std::vector<const openreg::OpEntry*> entries;
    for (const auto& kv : e->ops) entries.push_back(&kv.second);
    std::sort(entries.begin(), entries.end(),
              [](const openreg::OpEntry* a, const openreg::OpEntry* b) { return a->index < b->index; });
    py::dict ops;
    for (const auto* op : entries) {
      py::list dtypes;
      for (const auto& dt : op->dtypes) dtypes.append(openreg::dtype_name(dt));
      ops[py::str(op->name)] = dtypes;
    }
    d["ops"] = ops;
    out.append(d);
  }
  return out;
}

py::list route_timings() {
  py::list out;
  for (const auto& t : openreg::route_table().timings()) {
    py::dict d;
    d["op"] = t.op;
    d["dtype"] = t.dtype;
    d["sizes"] = t.sizes;
    d["size_class"] = t.size_class;
    d["engine"] = t.engine;
    d["calls"] = t.calls;
    d["ns"] = t.ns;
    out.append(d);
  }
  return out;
}

using RouteNames = std::unordered_map<std::string, std::vector<std::string>>;
using ShapeNames = std::unordered_map<std::string, std::vector<std::pair<std::vector<int64_t>, std::string>>>;

// chain: engine names; by_threads: per thread setting (one thread, more), the pair
// (prefer: "op|dtype" -> one engine name per size class, "" = none;
//  shapes: "op|dtype" -> [(sizes, engine name)], single shapes ahead of their class).
void set_tuned_routes(const std::vector<std::string>& chain,
                      const std::vector<std::pair<RouteNames, ShapeNames>>& by_threads) {
  TORCH_CHECK(by_threads.size() == openreg::kThreadSettings, "openreg: a tuned table needs ",
              openreg::kThreadSettings, " sets of choices (one thread, more threads), got ", by_threads.size());
  openreg::TunedRoutes t;
  t.chain = chain;
  for (size_t s = 0; s < by_threads.size(); ++s) {
    const auto& [prefer, shapes] = by_threads[s];
    for (const auto& [key, names] : prefer) {
      TORCH_CHECK(names.size() == openreg::kSizeClasses, "openreg: a tuned route needs ", openreg::kSizeClasses,
                  " engine names (one per size class), got ", names.size(), " for ", key);
      std::array<std::string, openreg::kSizeClasses> a;
      std::copy(names.begin(), names.end(), a.begin());
      t.by_threads[s].prefer.emplace(key, a);
    }
    t.by_threads[s].shapes = shapes;
  }
  openreg::set_pending_tuned_routes(std::move(t));
}

// Waits for the queued device work, without the GIL (nothing queued needs it, but a
// waiting thread must not keep other Python threads from enqueueing).
void wait_released() {
  if (!openreg::is_initialized()) return;
  py::gil_scoped_release no_gil;
  openreg::wait_for_queue();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "openreg device runtime (internal; use the openreg package and torch.openreg)";
  openreg::set_caller_location_hook(&openreg_python::caller_location);
  // Errors reach Python as torch's do: the message without the C++ backtrace.
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
  m.def("_lazy_init", [] { openreg::lazy_init(); });
  m.def("_is_initialized", &openreg::is_initialized);
  m.def("_is_in_bad_fork", &openreg::in_bad_fork);
  // Readers of what the worker counts wait for the queued work first.
  m.def("_wait_for_queue", &openreg::wait_for_queue, py::call_guard<py::gil_scoped_release>());
  openreg_python::bind_c10d_on_aliases(m);
  m.def("_device_count", [] { return static_cast<int>(openreg::device_count()); });
  m.def("_current_device", [] { return static_cast<int>(openreg::current_device()); });
  m.def("_set_device", [](int i) { openreg::set_device(static_cast<c10::DeviceIndex>(i)); });
  m.def("_check_device", [](int i) { openreg::check_device_index(static_cast<c10::DeviceIndex>(i)); });
  m.def("_get_default_generator", [](int i) -> py::object {
    const auto& gen = openreg::default_generator(static_cast<c10::DeviceIndex>(i));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(gen));
  });
  m.def("_stats", [] {
    wait_released();
    return engine_stats();
  });
  m.def("_reset_stats", [] {
    wait_released();
    openreg::route_table().reset_stats();
  });
  m.def("_route_timings", [] {
    wait_released();
    return route_timings();
  });
  m.def("_reset_route_timings", [] {
    wait_released();
    openreg::route_table().reset_timings();
  });
  m.def("_set_route_timing", [](bool on) { openreg::set_route_timing(on); });
  m.def("_set_tuned_routes", &set_tuned_routes);
  m.def("_set_tuned_routes_followed", [](bool on) {
    wait_released();  // queued calls were routed under the old setting: let them finish first
    openreg::set_tuned_routes_followed(on);
  });
  m.def(
      "_pin_engine",
      [](const std::string& name, int group, int groups) {
        TORCH_CHECK(groups >= 1 && group >= 0 && group < groups, "openreg: pin group ", group, " of ", groups,
                    ": expected 0 <= group < groups");
        const openreg::Engine* engine = name.empty() ? nullptr : chain_engine(name);
        wait_released();
        openreg::pin_engine(engine, group, groups);
      },
      py::arg("name"), py::arg("group") = 0, py::arg("groups") = 1);
  m.def("_tuned_routes_in_use", [] { return openreg::registry().tuned_routes() != nullptr; });
  m.def("_size_class_bounds", [] {
    return std::vector<int64_t>(std::begin(openreg::kSizeClassBounds), std::end(openreg::kSizeClassBounds));
  });
  m.def("_engines_found", &engines_found);
  m.def("_engine_chain", &engine_chain);
  m.def("_engine_dir", &openreg::builtin_engine_dir);
  // Whether the host may run calls of the op (a schema name, "aten::_foreach_add_.List")
  // in pieces: the conformance tool checks those calls on pieces (conformance_pieces.py).
  m.def("_foreach_op_runs_in_pieces",
        [](const std::string& op_name) { return openreg::ForeachSlices::elementwise_op(op_name.c_str()); });
  m.def("_abi_version", [] {
    return std::to_string(OPENREG_ABI_VERSION_MAJOR) + "." + std::to_string(OPENREG_ABI_VERSION_MINOR);
  });
}
