// Implementation of isa.hpp.
#include "isa.hpp"

namespace onednn_engine {

namespace {
// dnnl_cpu_isa_t values are bit sets: an ISA includes another when it has all its bits.
bool includes(dnnl::cpu_isa have, dnnl::cpu_isa want) {
  const auto h = static_cast<unsigned>(have), w = static_cast<unsigned>(want);
  return (h & w) == w;
}

std::string isa_name(dnnl::cpu_isa isa) {
  using I = dnnl::cpu_isa;
  // Most capable first: the first one included names the ISA.
  const std::pair<I, const char*> names[] = {
      {I::avx512_core_amx, "avx512_core_amx"}, {I::avx512_core_bf16, "avx512_core_bf16"},
      {I::avx512_core_vnni, "avx512_core_vnni"}, {I::avx512_core, "avx512_core"},
      {I::avx512_mic_4ops, "avx512_mic_4ops"}, {I::avx512_mic, "avx512_mic"},
      {I::avx2_vnni, "avx2_vnni"}, {I::avx2, "avx2"}, {I::avx, "avx"}, {I::sse41, "sse41"}};
  for (const auto& [i, n] : names)
    if (includes(isa, i)) return n;
  return "baseline (no SSE4.1)";
}
}  // namespace

const CpuCaps& cpu_caps() {
  static const CpuCaps caps = [] {
    CpuCaps c;
    c.isa = dnnl::get_effective_cpu_isa();
    c.avx512_core = includes(c.isa, dnnl::cpu_isa::avx512_core);
    c.avx2 = includes(c.isa, dnnl::cpu_isa::avx2);
    c.name = isa_name(c.isa);
    return c;
  }();
  return caps;
}

sdk::VectorIsa vector_isa() {
  const CpuCaps& caps = cpu_caps();
  return caps.avx512_core ? sdk::VectorIsa::kAvx512 : caps.avx2 ? sdk::VectorIsa::kAvx2 : sdk::VectorIsa::kBaseline;
}

bool has_primitives(openreg_dtype d) { return is_f32(d) || (is_bf16(d) && cpu_caps().avx512_core); }

void require_primitives(const sdk::Call& call, openreg_dtype d) {
  OPENREG_SDK_REQUIRE(!is_bf16(d) || cpu_caps().avx512_core, call.op_name(),
                      ": bfloat16 needs AVX-512 (avx512_core) in oneDNN 2.6; its ISA here is ", cpu_caps().name,
                      " (ONEDNN_MAX_CPU_ISA caps it)");
}

}  // namespace onednn_engine
