// What a device supports, for torch.accelerator.get_device_capability. The rest
// of the device properties (name, memory, cores, ABI version) are host facts
// that python/openreg/device_properties.py reads.
#include "runtime.h"

#include "../bridge/torch_abi.h"

namespace openreg {

c10::DeviceCapability device_capability(c10::DeviceIndex index) {
  check_device_index(index);
  // Device memory is host memory, so any dtype can be allocated; what a device
  // tensor of that dtype can then do (copies, conversions, ops) goes through
  // the engines, which see only the ABI's dtypes.
  c10::DeviceCapability cap;
  cap.capability_data.capability_bits = 0;
  openreg_dtype abi;
#define OPENREG_SET_IF_ABI_DTYPE(_, name)                 \
  if (bridge::to_abi_dtype(c10::ScalarType::name, &abi)) \
    cap.capability_data.capability_bits |= uint64_t{1} << c10::kIndex_##name;
  AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(OPENREG_SET_IF_ABI_DTYPE)
#undef OPENREG_SET_IF_ABI_DTYPE
  return cap;
}

}  // namespace openreg
