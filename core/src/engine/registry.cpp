// OPENREG_ENGINE resolution: names, paths and comma chains become loaded engines.
#include "engine_host.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstdlib>
#include <sstream>

namespace openreg {

namespace {

const char* kPrefix = "libopenreg_engine_";
const char* kSuffix = ".so";
// `auto` picks the first of these that is built, then falls back to aten_ref.
const char* kAutoOrder[] = {"onednn", "eigen"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) {
    cur.erase(0, cur.find_first_not_of(" \t"));
    cur.erase(cur.find_last_not_of(" \t") + 1);
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

bool is_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool looks_like_path(const std::string& item) {
  return item.find('/') != std::string::npos ||
         (item.size() > 3 && item.compare(item.size() - 3, 3, ".so") == 0);
}

}  // namespace

Registry::Config Registry::config_from_env(const std::string& builtin_dir) {
  Config c;
  if (const char* e = std::getenv("OPENREG_ENGINE"); e && *e) c.spec = e;
  if (const char* p = std::getenv("OPENREG_ENGINE_PATH"); p && *p) c.search_dirs = split(p, ':');
  if (!builtin_dir.empty()) c.search_dirs.push_back(builtin_dir);
  if (const char* f = std::getenv("OPENREG_FALLBACK"); f && *f) {
    std::string v = f;
    if (v == "none") {
      c.fallback = false;
    } else if (v != "aten_ref") {
      throw EngineError("openreg: OPENREG_FALLBACK='" + v +
                        "' is not understood. Use OPENREG_FALLBACK=aten_ref (the default: ops an "
                        "engine does not cover run on the reference engine) or "
                        "OPENREG_FALLBACK=none (strict: such ops raise an error)");
    }
  }
  return c;
}

Registry::Registry(Config config, openreg_host host) : config_(std::move(config)), host_(host) {}

std::vector<EngineFile> Registry::discover() const {
  std::vector<EngineFile> found;
  const std::string prefix = kPrefix, suffix = kSuffix;
  for (const auto& dir : config_.search_dirs) {
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    std::vector<std::string> names;
    while (dirent* ent = readdir(d)) names.emplace_back(ent->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      if (n.size() <= prefix.size() + suffix.size() || n.compare(0, prefix.size(), prefix) != 0 ||
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      std::string name = n.substr(prefix.size(), n.size() - prefix.size() - suffix.size());
      bool seen = std::any_of(found.begin(), found.end(), [&](const EngineFile& f) { return f.name == name; });
      if (!seen && is_file(dir + "/" + n)) found.push_back({name, dir + "/" + n});
    }
  }
  return found;
}

std::string Registry::find_engine_file(const std::string& name) const {
  for (const auto& dir : config_.search_dirs) {
    std::string p = dir + "/" + kPrefix + name + kSuffix;
    if (is_file(p)) return p;
  }
  return "";
}

std::string Registry::available_list() const {
  auto found = discover();
  if (found.empty()) return "none found";
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : ", ") + f.name;
  return out;
}

Engine* Registry::load(const std::string& given) {
  // One library, one init(), however its path is spelled.
  char resolved[PATH_MAX];
  std::string path = realpath(given.c_str(), resolved) ? resolved : given;
  for (auto& e : engines_) {
    if (e->path == path) return e.get();
  }
  engines_.push_back(load_engine(path, &host_));
  return engines_.back().get();
}

bool Registry::set_tuned_routes(TunedRoutes tuned) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (loaded_ || config_.spec != "auto") return false;
  tuned_ = std::move(tuned);
  return true;
}

const std::vector<Engine*>& Registry::chain() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (loaded_) {
    if (!error_.empty()) throw EngineError(error_);
    return chain_;
  }
  loaded_ = true;
  try {
    std::vector<std::string> items = split(config_.spec, ',');
    if (items.empty()) items.push_back("auto");
    std::vector<std::string> paths;
    for (const auto& item : items) {
      if (item == "auto" && !tuned_.chain.empty()) {  // the tuned table's engines
        for (const auto& name : tuned_.chain) {
          std::string p = find_engine_file(name);
          if (!p.empty() && name != "aten_ref") paths.push_back(p);
        }
        continue;
      }
      if (item == "auto") {
        for (const char* name : kAutoOrder) {
          std::string p = find_engine_file(name);
          if (!p.empty()) {
            paths.push_back(p);
            break;
          }
        }
        continue;
      }
      if (looks_like_path(item)) {
        if (!is_file(item)) {
          throw EngineError("openreg: OPENREG_ENGINE names '" + item +
                            "', but no such file exists. Give the path of an engine library, or one "
                            "of the engines available: " + available_list());
        }
        paths.push_back(item);
        continue;
      }
      std::string p = find_engine_file(item);
      if (p.empty()) {
        std::string dirs;
        for (const auto& d : config_.search_dirs) dirs += (dirs.empty() ? "" : ":") + d;
        throw EngineError("openreg: unknown engine '" + item + "' in OPENREG_ENGINE=" + config_.spec +
                          ". Engines available: " + available_list() +
                          ". Set OPENREG_ENGINE to one of them, to a comma-separated chain, or to "
                          "the path of an engine library (searched in: " + dirs + ")");
      }
      paths.push_back(p);
    }
    if (config_.fallback || paths.empty()) {
      std::string ref = find_engine_file("aten_ref");
      if (ref.empty()) {
        throw EngineError("openreg: the reference engine aten_ref (libopenreg_engine_aten_ref.so) "
                          "was not found; the openreg installation is incomplete. Reinstall "
                          "openreg, or add its folder to OPENREG_ENGINE_PATH");
      }
      paths.push_back(ref);
    }
    for (const auto& p : paths) {
      Engine* e = load(p);
      if (std::find(chain_.begin(), chain_.end(), e) == chain_.end()) chain_.push_back(e);
    }
  } catch (const EngineError& e) {
    error_ = e.what();
    chain_.clear();
    throw;
  }
  if (verbosity() >= 1) {
    std::string names;
    for (auto* e : chain_) names += (names.empty() ? "" : " -> ") + e->name + " (" + e->path + ")";
    log_line("engine chain: " + names);
  }
  return chain_;
}

}  // namespace openreg
