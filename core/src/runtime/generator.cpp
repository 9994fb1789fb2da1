// Per-device random generators. The state is a counter-based stream: (seed,
// offset). Every random op takes the current pair and advances the offset, and
// engines derive all numbers of that call from the pair (see engine.h), so
// manual_seed and get/set_rng_state behave as on CUDA.
#include "runtime.h"

#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <random>

namespace openreg {

namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default seed

class OpenRegGenerator final : public c10::GeneratorImpl {
 public:
  explicit OpenRegGenerator(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(kDevice, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16 &&
                    state.device().is_cpu(),
                "openreg: an RNG state is a CPU uint8 tensor of 16 bytes (from get_rng_state()); got ",
                state.numel(), " elements of ", state.dtype().name(), " on ", state.device());
    const auto* bytes = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, bytes, 8);
    std::memcpy(&offset_, bytes + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto t = at::empty({16}, at::TensorOptions().dtype(at::kByte).device(at::kCPU));
    auto* bytes = static_cast<uint8_t*>(t.data_ptr());
    std::memcpy(bytes, &seed_, 8);
    std::memcpy(bytes + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  // Returns the stream for one call and moves past it.
  void take(uint64_t* seed, uint64_t* offset) {
    std::lock_guard<std::mutex> lock(mutex_);
    *seed = seed_;
    *offset = offset_++;
  }

 private:
  OpenRegGenerator* clone_impl() const override {
    auto* g = new OpenRegGenerator(device().index());
    g->seed_ = seed_;
    g->offset_ = offset_;
    return g;
  }

  uint64_t seed_ = kDefaultSeed;
  uint64_t offset_ = 0;
};

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::once_flag once;
  static std::deque<at::Generator> generators;
  std::call_once(once, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      generators.push_back(at::make_generator<OpenRegGenerator>(i));
    }
  });
  check_device_index(index);
  return generators[index];
}

at::Generator make_generator(c10::DeviceIndex index) {
  check_device_index(index);
  return at::make_generator<OpenRegGenerator>(index);
}

void next_random_stream(const std::optional<at::Generator>& gen, c10::DeviceIndex index, uint64_t* seed,
                        uint64_t* offset) {
  at::Generator g = gen.has_value() && gen->defined() ? *gen : default_generator(index);
  TORCH_CHECK(g.device().type() == kDevice, "openreg: expected an openreg generator, got one for ",
              g.device(), ". Create it with torch.Generator(device='openreg')");
  static_cast<OpenRegGenerator*>(g.unsafeGetGeneratorImpl())->take(seed, offset);
}

}  // namespace openreg
