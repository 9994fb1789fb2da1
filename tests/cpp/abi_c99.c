/*
 * engine.h seen by a C compiler. Built with -std=c99 -Wall -Wextra -pedantic
 * -Werror (and again as C11, which takes the _Static_assert branch of the
 * header's layout pins), so the header must stay valid, warning-free C.
 *
 * openreg_abi_c_layout() reports the layout as the C compiler sees it; the C++
 * test (test_abi.cpp) compares it field by field with what g++ computes, so a
 * divergence between the two languages fails the build's tests. Compiled with
 * -DOPENREG_ABI_C99_MAIN, the file is also a small program that prints the same
 * table and checks the documented 64-bit values itself.
 */
#include <openreg/engine.h>
#include <openreg/dtype_name.h>

#include <stdio.h>
#include <string.h>

/* The header must not have defined C++-only or non-C99 leftovers. */
#ifdef bool
#error "engine.h must not pull in stdbool.h"
#endif

/* Callable from C with the documented types: a C engine compiles against it. */
static openreg_status c_run(void* ctx, const openreg_call* call) {
  (void)ctx;
  (void)call;
  return OPENREG_STATUS_OK;
}
static const openreg_engine* c_entry(int32_t major, int32_t minor) {
  (void)major;
  (void)minor;
  return NULL;
}

typedef struct abi_c_field {
  const char* name;
  size_t value;
} abi_c_field;

#define SZ(T) {"sizeof(" #T ")", sizeof(T)}
#define OFF(T, f) {"offsetof(" #T ", " #f ")", offsetof(T, f)}

static const abi_c_field k_fields[] = {
#include "abi_fields.inc"
};

/* Number of entries; the entries themselves through openreg_abi_c_field_at. */
size_t openreg_abi_c_field_count(void);
int openreg_abi_c_field_at(size_t i, const char** name, size_t* value);

size_t openreg_abi_c_field_count(void) { return sizeof k_fields / sizeof k_fields[0]; }

int openreg_abi_c_field_at(size_t i, const char** name, size_t* value) {
  openreg_engine_entry_fn entry = c_entry;
  openreg_engine probe;
  if (i >= openreg_abi_c_field_count()) return 0;
  /* Keep the C-typed helpers referenced: the function pointer types of the
   * header accept plain C functions without casts. */
  memset(&probe, 0, sizeof probe);
  probe.run = c_run;
  (void)entry;
  (void)probe;
  *name = k_fields[i].name;
  *value = k_fields[i].value;
  return 1;
}

#ifdef OPENREG_ABI_C99_MAIN
int main(void) {
  size_t i;
  const char* name;
  size_t value;
  unsigned char magic[8];
  unsigned long long m = OPENREG_ENGINE_MAGIC;
  int failures = 0;
  printf("engine.h as C (__STDC_VERSION__ %ldL), ABI %d.%d\n", (long)__STDC_VERSION__,
         OPENREG_ABI_VERSION_MAJOR, OPENREG_ABI_VERSION_MINOR);
  for (i = 0; openreg_abi_c_field_at(i, &name, &value); ++i) {
    printf("  %-44s %3lu\n", name, (unsigned long)value);
  }
  for (i = 0; i < 8; ++i) magic[i] = (unsigned char)((m >> (8 * i)) & 0xFF);
  printf("  OPENREG_ENGINE_MAGIC bytes (little-endian): %.8s\n", (const char*)magic);
  if (sizeof(void*) == 8) {
    /* the released 1.0 layout on 64-bit platforms */
    if (sizeof(openreg_tensor) != 48 || sizeof(openreg_value) != 32 || sizeof(openreg_call) != 64 ||
        sizeof(openreg_host) != 72 || sizeof(openreg_op_info) != 24 || sizeof(openreg_engine) != 96 ||
        OPENREG_ENGINE_MIN_STRUCT_SIZE != 80) {
      printf("FAIL: 64-bit struct sizes differ from the 1.0 layout\n");
      failures++;
    }
  }
  return failures == 0 ? 0 : 1;
}
#endif
