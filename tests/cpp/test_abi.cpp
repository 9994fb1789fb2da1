// The engine ABI as a C++17 compiler sees it: the documented layout, constants
// and types of core/include/openreg/engine.h, and agreement with the C compiler
// (abi_c99.c, compiled as C99 with -pedantic -Werror).
#include <openreg/engine.h>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <type_traits>

extern "C" {
size_t openreg_abi_c_field_count(void);
int openreg_abi_c_field_at(size_t i, const char** name, size_t* value);
}

namespace {

constexpr bool k64Bit = sizeof(void*) == 8;

#define SZ(T) {"sizeof(" #T ")", sizeof(T)}
#define OFF(T, f) {"offsetof(" #T ", " #f ")", offsetof(T, f)}

// The same list as abi_c99.c, computed by g++.
std::map<std::string, size_t> cxx_layout() {
  return {
#include "abi_fields.inc"
  };
}

TEST(AbiLayout, CAndCxxCompilersAgreeOnEveryField) {
  auto cxx = cxx_layout();
  ASSERT_EQ(openreg_abi_c_field_count(), cxx.size()) << "abi_c99.c and test_abi.cpp list different fields";
  for (size_t i = 0; i < openreg_abi_c_field_count(); ++i) {
    const char* name = nullptr;
    size_t c_value = 0;
    ASSERT_TRUE(openreg_abi_c_field_at(i, &name, &c_value));
    auto it = cxx.find(name);
    ASSERT_NE(it, cxx.end()) << name << " is not in the C++ list";
    EXPECT_EQ(c_value, it->second) << name << ": C says " << c_value << ", C++ says " << it->second;
  }
}

// The released 1.0 layout on 64-bit platforms, field by field, as documented by
// the order and types in engine.h (the header's static asserts pin a subset).
TEST(AbiLayout, Released64BitLayout) {
  if (!k64Bit) GTEST_SKIP() << "the pinned layout is the 64-bit one";
  const std::map<std::string, size_t> expected = {
      {"sizeof(openreg_dtype)", 4},
      {"offsetof(openreg_dtype, code)", 0},
      {"offsetof(openreg_dtype, bits)", 1},
      {"offsetof(openreg_dtype, lanes)", 2},

      {"sizeof(openreg_tensor)", 48},
      {"offsetof(openreg_tensor, struct_size)", 0},
      {"offsetof(openreg_tensor, ndim)", 4},
      {"offsetof(openreg_tensor, data)", 8},
      {"offsetof(openreg_tensor, byte_offset)", 16},
      {"offsetof(openreg_tensor, sizes)", 24},
      {"offsetof(openreg_tensor, strides)", 32},
      {"offsetof(openreg_tensor, dtype)", 40},
      {"offsetof(openreg_tensor, device_index)", 44},

      {"sizeof(openreg_value)", 32},
      {"offsetof(openreg_value, kind)", 0},
      {"offsetof(openreg_value, reserved)", 4},
      {"offsetof(openreg_value, u)", 8},
      {"offsetof(openreg_value, u.i)", 8},
      {"offsetof(openreg_value, u.tensors.count)", 16},
      {"offsetof(openreg_value, u.str.length)", 16},
      {"offsetof(openreg_value, u.scalar.kind)", 8},
      {"offsetof(openreg_value, u.scalar.v)", 16},
      {"offsetof(openreg_value, u.scalar.imag)", 24},
      {"offsetof(openreg_value, u.generator.offset)", 16},

      {"sizeof(openreg_call)", 64},
      {"offsetof(openreg_call, struct_size)", 0},
      {"offsetof(openreg_call, flags)", 4},
      {"offsetof(openreg_call, op_name)", 8},
      {"offsetof(openreg_call, op_index)", 16},
      {"offsetof(openreg_call, num_args)", 20},
      {"offsetof(openreg_call, args)", 24},
      {"offsetof(openreg_call, num_outputs)", 32},
      {"offsetof(openreg_call, reserved)", 36},
      {"offsetof(openreg_call, outputs)", 40},
      {"offsetof(openreg_call, alloc_output)", 48},
      {"offsetof(openreg_call, host_call_ctx)", 56},

      {"sizeof(openreg_host)", 72},
      {"offsetof(openreg_host, struct_size)", 0},
      {"offsetof(openreg_host, abi_major)", 4},
      {"offsetof(openreg_host, abi_minor)", 8},
      {"offsetof(openreg_host, reserved)", 12},
      {"offsetof(openreg_host, ctx)", 16},
      {"offsetof(openreg_host, set_error)", 24},
      {"offsetof(openreg_host, log)", 32},
      {"offsetof(openreg_host, scratch_alloc)", 40},
      {"offsetof(openreg_host, scratch_free)", 48},
      {"offsetof(openreg_host, parallel_for)", 56},
      {"offsetof(openreg_host, get_num_threads)", 64},

      {"sizeof(openreg_op_info)", 24},
      {"offsetof(openreg_op_info, struct_size)", 0},
      {"offsetof(openreg_op_info, num_dtypes)", 4},
      {"offsetof(openreg_op_info, name)", 8},
      {"offsetof(openreg_op_info, dtypes)", 16},

      {"sizeof(openreg_engine)", 96},
      {"offsetof(openreg_engine, struct_size)", 0},
      {"offsetof(openreg_engine, abi_major)", 4},
      {"offsetof(openreg_engine, abi_minor)", 8},
      {"offsetof(openreg_engine, flags)", 12},
      {"offsetof(openreg_engine, magic)", 16},
      {"offsetof(openreg_engine, name)", 24},
      {"offsetof(openreg_engine, version)", 32},
      {"offsetof(openreg_engine, ctx)", 40},
      {"offsetof(openreg_engine, init)", 48},
      {"offsetof(openreg_engine, release)", 56},
      {"offsetof(openreg_engine, get_ops)", 64},
      {"offsetof(openreg_engine, run)", 72},
      {"offsetof(openreg_engine, supports)", 80},
      {"offsetof(openreg_engine, get_proc_address)", 88},
      {"OPENREG_ENGINE_MIN_STRUCT_SIZE", 80},
  };
  auto actual = cxx_layout();
  ASSERT_EQ(expected.size(), actual.size());
  for (const auto& kv : expected) {
    auto it = actual.find(kv.first);
    ASSERT_NE(it, actual.end()) << kv.first;
    EXPECT_EQ(it->second, kv.second) << kv.first;
  }
}

// Every cross-boundary struct starts with uint32_t struct_size (the versioning rule).
TEST(AbiLayout, VersionedStructsStartWithUint32StructSize) {
  EXPECT_TRUE((std::is_same_v<decltype(openreg_tensor::struct_size), uint32_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_call::struct_size), uint32_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_host::struct_size), uint32_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_op_info::struct_size), uint32_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_engine::struct_size), uint32_t>));
  EXPECT_EQ(offsetof(openreg_tensor, struct_size), 0u);
  EXPECT_EQ(offsetof(openreg_call, struct_size), 0u);
  EXPECT_EQ(offsetof(openreg_host, struct_size), 0u);
  EXPECT_EQ(offsetof(openreg_op_info, struct_size), 0u);
  EXPECT_EQ(offsetof(openreg_engine, struct_size), 0u);
}

// "No bool, no enum-typed fields": every field is a fixed-width integer, a pointer
// or a function pointer, so the layout does not depend on compiler choices.
TEST(AbiLayout, NoBoolOrEnumFields) {
  EXPECT_TRUE((std::is_same_v<decltype(openreg_dtype::code), uint8_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_dtype::bits), uint8_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_dtype::lanes), uint16_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_value::kind), int32_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_call::flags), int32_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_engine::flags), int32_t>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_engine::magic), uint64_t>));
  EXPECT_TRUE((std::is_same_v<openreg_status, int32_t>));
  EXPECT_TRUE(std::is_trivially_copyable_v<openreg_value>);
  EXPECT_TRUE(std::is_standard_layout_v<openreg_engine>);
  EXPECT_TRUE(std::is_standard_layout_v<openreg_call>);
}

// The minimum accepted engine table ends exactly after `run`: the four required
// functions are inside it, the two optional ones outside.
TEST(AbiLayout, MinStructSizeCoversRequiredFunctionsOnly) {
  EXPECT_EQ(OPENREG_ENGINE_MIN_STRUCT_SIZE, offsetof(openreg_engine, run) + sizeof(void*));
  EXPECT_GE(OPENREG_ENGINE_MIN_STRUCT_SIZE, offsetof(openreg_engine, init) + sizeof(void*));
  EXPECT_GE(OPENREG_ENGINE_MIN_STRUCT_SIZE, offsetof(openreg_engine, release) + sizeof(void*));
  EXPECT_GE(OPENREG_ENGINE_MIN_STRUCT_SIZE, offsetof(openreg_engine, get_ops) + sizeof(void*));
  EXPECT_LE(OPENREG_ENGINE_MIN_STRUCT_SIZE, offsetof(openreg_engine, supports));
  EXPECT_LT(OPENREG_ENGINE_MIN_STRUCT_SIZE, sizeof(openreg_engine));
  // magic and struct_size, read before anything else, are inside the minimum.
  EXPECT_LE(offsetof(openreg_engine, magic) + sizeof(uint64_t), OPENREG_ENGINE_MIN_STRUCT_SIZE);
}

// --------------------------------------------------------------- constants

TEST(AbiConstants, MagicSpellsOPENREG1InLittleEndian) {
  const uint64_t magic = OPENREG_ENGINE_MAGIC;
  char bytes[9] = {};
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((magic >> (8 * i)) & 0xFF);
  EXPECT_STREQ(bytes, "OPENREG1") << "OPENREG_ENGINE_MAGIC = 0x" << std::hex << magic
                                  << " reads as \"" << bytes
                                  << "\" in memory on a little-endian machine; \"OPENREG1\" is "
                                     "0x314745524E45504F";
  // On this (little-endian) machine, the bytes of an engine table's magic field.
  uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  if (first == 1) {
    char mem[9] = {};
    std::memcpy(mem, &magic, 8);
    EXPECT_STREQ(mem, "OPENREG1");
  }
}

TEST(AbiConstants, Versions) {
  EXPECT_EQ(OPENREG_ABI_VERSION_MAJOR, 1);
  EXPECT_GE(OPENREG_ABI_VERSION_MINOR, 0);
  EXPECT_STREQ(OPENREG_ENGINE_ENTRY_SYMBOL, "openreg_engine_entry");
}

TEST(AbiConstants, StatusCodesAreDistinctAndOkIsZero) {
  EXPECT_EQ(OPENREG_STATUS_OK, 0);
  std::set<int> codes = {OPENREG_STATUS_OK, OPENREG_STATUS_UNSUPPORTED, OPENREG_STATUS_INVALID_ARGUMENT,
                         OPENREG_STATUS_OUT_OF_MEMORY, OPENREG_STATUS_INTERNAL,
                         OPENREG_STATUS_NOT_INITIALIZED};
  EXPECT_EQ(codes.size(), 6u);
}

TEST(AbiConstants, ValueKindsAreDistinctAndDense) {
  const int kinds[] = {OPENREG_VALUE_NONE,        OPENREG_VALUE_TENSOR,      OPENREG_VALUE_TENSOR_LIST,
                       OPENREG_VALUE_INT,         OPENREG_VALUE_DOUBLE,      OPENREG_VALUE_BOOL,
                       OPENREG_VALUE_INT_LIST,    OPENREG_VALUE_SCALAR,      OPENREG_VALUE_STRING,
                       OPENREG_VALUE_DTYPE,       OPENREG_VALUE_DOUBLE_LIST, OPENREG_VALUE_BOOL_LIST,
                       OPENREG_VALUE_GENERATOR,   OPENREG_VALUE_LAYOUT,      OPENREG_VALUE_MEMORY_FORMAT,
                       OPENREG_VALUE_DEVICE};
  std::set<int> seen(std::begin(kinds), std::end(kinds));
  EXPECT_EQ(seen.size(), std::size(kinds)) << "two OPENREG_VALUE_* kinds share a code";
  EXPECT_EQ(*seen.begin(), 0) << "an all-zero openreg_value must be NONE";
  EXPECT_EQ(*seen.rbegin(), static_cast<int>(std::size(kinds)) - 1) << "kinds are 0..N-1";
}

TEST(AbiConstants, ScalarKindsAreDistinct) {
  std::set<int> seen = {OPENREG_SCALAR_INT, OPENREG_SCALAR_DOUBLE, OPENREG_SCALAR_BOOL,
                        OPENREG_SCALAR_COMPLEX};
  EXPECT_EQ(seen.size(), 4u);
}

// "Same layout and codes as DLPack's DLDataType" (kDLInt=0, kDLUInt=1,
// kDLFloat=2, kDLBfloat=4, kDLComplex=5, kDLBool=6).
TEST(AbiConstants, DtypeCodesMatchDLPack) {
  EXPECT_EQ(OPENREG_DTYPE_CODE_INT, 0);
  EXPECT_EQ(OPENREG_DTYPE_CODE_UINT, 1);
  EXPECT_EQ(OPENREG_DTYPE_CODE_FLOAT, 2);
  EXPECT_EQ(OPENREG_DTYPE_CODE_BFLOAT, 4);
  EXPECT_EQ(OPENREG_DTYPE_CODE_COMPLEX, 5);
  EXPECT_EQ(OPENREG_DTYPE_CODE_BOOL, 6);
  // DLDataType is {uint8 code, uint8 bits, uint16 lanes}; float32 is 02 20 01 00.
  openreg_dtype f32 = {OPENREG_DTYPE_CODE_FLOAT, 32, 1};
  unsigned char raw[4];
  std::memcpy(raw, &f32, 4);
  EXPECT_EQ(raw[0], 2);
  EXPECT_EQ(raw[1], 32);
  uint16_t lanes;
  std::memcpy(&lanes, raw + 2, 2);
  EXPECT_EQ(lanes, 1);
}

TEST(AbiConstants, EngineFlagsAreDistinctBits) {
  const int flags[] = {OPENREG_ENGINE_FLAG_CONCURRENT_RUN, OPENREG_ENGINE_FLAG_HOST_MEMORY,
                       OPENREG_ENGINE_FLAG_ANY_OP};
  int all = 0;
  for (int f : flags) {
    EXPECT_NE(f, 0);
    EXPECT_EQ(f & (f - 1), 0) << f << " is not a single bit";
    EXPECT_EQ(all & f, 0) << f << " overlaps another flag";
    all |= f;
  }
  EXPECT_NE(OPENREG_CALL_DYNAMIC_OUTPUTS, 0);
  EXPECT_EQ(OPENREG_CALL_DYNAMIC_OUTPUTS & (OPENREG_CALL_DYNAMIC_OUTPUTS - 1), 0);
}

TEST(AbiConstants, LogLevelsAreOrderedBySeverity) {
  EXPECT_LT(OPENREG_LOG_ERROR, OPENREG_LOG_WARNING);
  EXPECT_LT(OPENREG_LOG_WARNING, OPENREG_LOG_INFO);
  EXPECT_LT(OPENREG_LOG_INFO, OPENREG_LOG_DEBUG);
}

// ------------------------------------------------------------------- types

openreg_status typed_run(void*, const openreg_call*) { return OPENREG_STATUS_OK; }
const openreg_engine* typed_entry(int32_t, int32_t) { return nullptr; }

TEST(AbiTypes, FunctionPointerSignatures) {
  EXPECT_TRUE((std::is_same_v<decltype(openreg_engine::run), openreg_status (*)(void*, const openreg_call*)>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_engine::supports), decltype(openreg_engine::run)>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_engine::init),
                              openreg_status (*)(void*, const openreg_host*, int32_t)>));
  EXPECT_TRUE((std::is_same_v<decltype(openreg_host::set_error), void (*)(void*, openreg_status, const char*)>));
  EXPECT_TRUE((std::is_same_v<openreg_engine_entry_fn, const openreg_engine* (*)(int32_t, int32_t)>));
  openreg_engine_entry_fn entry = typed_entry;
  openreg_engine table{};
  table.run = typed_run;
  EXPECT_EQ(entry(1, 0), nullptr);
  EXPECT_EQ(table.run(nullptr, nullptr), OPENREG_STATUS_OK);
}

// A zero-initialised value is an absent argument; the scalar's payload shares the
// union's storage with the plain int/double (engines read u.scalar.v.* only).
TEST(AbiTypes, ValueDefaultsAndScalarPayload) {
  openreg_value v{};
  EXPECT_EQ(v.kind, OPENREG_VALUE_NONE);
  v.kind = OPENREG_VALUE_SCALAR;
  v.u.scalar.kind = OPENREG_SCALAR_COMPLEX;
  v.u.scalar.v.d = 1.5;
  v.u.scalar.imag = -2.5;
  openreg_value copy;
  std::memcpy(&copy, &v, sizeof v);
  EXPECT_EQ(copy.u.scalar.kind, OPENREG_SCALAR_COMPLEX);
  EXPECT_DOUBLE_EQ(copy.u.scalar.v.d, 1.5);
  EXPECT_DOUBLE_EQ(copy.u.scalar.imag, -2.5);
  EXPECT_LE(sizeof(v.u), 24u);
}

}  // namespace
