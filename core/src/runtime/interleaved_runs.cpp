#include "interleaved_runs.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <tuple>

namespace openreg {

namespace {

// 128K elements (half a MiB of float32 per list). Measured on a 2-CPU AVX-512 Xeon VM
// (2 MiB L2 a core), AdamW's foreach step behind a busy worker: 16K-element groups were
// best at one thread and worst at two (each group is an engine call per op, a parallel
// region each); 128K kept ResNet-18's step 15% under whole ops at two threads and BERT's
// level (docs/design.md, "Optimizer steps interleaved").
constexpr int64_t kDefaultGroupElements = 131072;

}  // namespace

bool spans_meet_elementwise(std::vector<TensorSpan>& spans) {
  spans.erase(std::remove_if(spans.begin(), spans.end(), [](const TensorSpan& s) { return s.end <= s.begin; }),
              spans.end());
  std::sort(spans.begin(), spans.end(), [](const TensorSpan& a, const TensorSpan& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  const TensorSpan* cluster = nullptr;  // the span every overlapping one must equal
  for (const TensorSpan& s : spans) {
    if (cluster && s.begin < cluster->end) {
      if (s.begin != cluster->begin || s.end != cluster->end || s.position != cluster->position ||
          s.element_size != cluster->element_size) {
        return false;
      }
      continue;
    }
    cluster = &s;
  }
  return true;
}

std::vector<std::vector<Slice>> slice_groups(const std::vector<int64_t>& numel, int64_t group_elements) {
  std::vector<std::vector<Slice>> groups;
  if (group_elements <= 0) return groups;
  std::vector<Slice> group;
  int64_t in_group = 0;
  for (int64_t p = 0; p < static_cast<int64_t>(numel.size()); ++p) {
    for (int64_t begin = 0; begin < numel[p];) {
      const int64_t end = std::min(numel[p], begin + (group_elements - in_group));
      group.push_back({p, begin, end});
      in_group += end - begin;
      begin = end;
      if (in_group >= group_elements) {
        groups.push_back(std::move(group));
        group.clear();
        in_group = 0;
      }
    }
  }
  if (!group.empty()) groups.push_back(std::move(group));
  return groups;
}

int64_t interleave_group_elements() {
  static const int64_t elements = [] {
    const char* v = std::getenv("OPENREG_INTERLEAVE_FOREACH");
    if (!v || !*v) return kDefaultGroupElements;
    const std::string text(v);
    if (text == "off" || text == "false" || text == "no") return int64_t{0};
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (end && *end == '\0' && n >= 0) return static_cast<int64_t>(n);
    return kDefaultGroupElements;  // "on", "yes": the default size
  }();
  return elements;
}

}  // namespace openreg
