/*
 * openreg dtype names: PyTorch's spelling of an openreg_dtype ("float32",
 * "bfloat16", "int64", "bool"), the one spelling the host's messages, its crash
 * report and the engine SDK share. Plain C; compiles as C99 and as C++17.
 * Allocation-free and async-signal-safe (the crash handler uses it).
 */
#ifndef OPENREG_DTYPE_NAME_H_
#define OPENREG_DTYPE_NAME_H_

#include <stddef.h>
#include <stdint.h>

#include <openreg/engine.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The name of a dtype PyTorch has a name for ("float32", "bfloat16", "uint8",
 * "complex64", "bool"; bool whatever its bits), as a static string; NULL for any
 * other code, width or lane count. */
static inline const char* openreg_dtype_name(openreg_dtype d) {
  if (d.code == OPENREG_DTYPE_CODE_BOOL) return "bool";
  if (d.lanes != 1) return NULL;
  switch (d.code) {
    case OPENREG_DTYPE_CODE_FLOAT:
      switch (d.bits) {
        case 16: return "float16";
        case 32: return "float32";
        case 64: return "float64";
        default: return NULL;
      }
    case OPENREG_DTYPE_CODE_BFLOAT: return d.bits == 16 ? "bfloat16" : NULL;
    case OPENREG_DTYPE_CODE_INT:
      switch (d.bits) {
        case 8: return "int8";
        case 16: return "int16";
        case 32: return "int32";
        case 64: return "int64";
        default: return NULL;
      }
    case OPENREG_DTYPE_CODE_UINT:
      switch (d.bits) {
        case 8: return "uint8";
        case 16: return "uint16";
        case 32: return "uint32";
        case 64: return "uint64";
        default: return NULL;
      }
    case OPENREG_DTYPE_CODE_COMPLEX:
      switch (d.bits) {
        case 32: return "complex32";
        case 64: return "complex64";
        case 128: return "complex128";
        default: return NULL;
      }
    default: return NULL;
  }
}

/* Any dtype spelled into buf (capacity cap >= 1, always NUL-terminated, cut to
 * fit): the name above when there is one, else the family and width the same way
 * ("float8", "int128"), lanes other than 1 as "float32x4", and an unknown code as
 * "code<N>_<bits>". Returns the length written. */
static inline size_t openreg_dtype_format(openreg_dtype d, char* buf, size_t cap) {
  const char* known = openreg_dtype_name(d);
  const char* family = NULL;
  size_t n = 0;
  int pass;
  if (!buf || cap == 0) return 0;
#define OPENREG_DTYPE_PUT_(c) \
  do { if (n + 1 < cap) buf[n++] = (c); } while (0)
  if (known) {
    for (; *known; ++known) OPENREG_DTYPE_PUT_(*known);
    buf[n] = '\0';
    return n;
  }
  switch (d.code) {
    case OPENREG_DTYPE_CODE_FLOAT: family = "float"; break;
    case OPENREG_DTYPE_CODE_BFLOAT: family = "bfloat"; break;
    case OPENREG_DTYPE_CODE_INT: family = "int"; break;
    case OPENREG_DTYPE_CODE_UINT: family = "uint"; break;
    case OPENREG_DTYPE_CODE_COMPLEX: family = "complex"; break;
    default: family = NULL; break;
  }
  if (family) {
    for (; *family; ++family) OPENREG_DTYPE_PUT_(*family);
  }
  /* pass 0: the code (unknown codes only), 1: the bits, 2: the lanes (when not 1). */
  for (pass = 0; pass < 3; ++pass) {
    char digits[8];
    int k = 0;
    uint32_t v;
    if (pass == 0 && family) continue;
    if (pass == 2 && d.lanes == 1) continue;
    if (pass == 0) {
      OPENREG_DTYPE_PUT_('c'); OPENREG_DTYPE_PUT_('o'); OPENREG_DTYPE_PUT_('d'); OPENREG_DTYPE_PUT_('e');
      v = d.code;
    } else if (pass == 1) {
      v = d.bits;
    } else {
      OPENREG_DTYPE_PUT_('x');
      v = d.lanes;
    }
    do { digits[k++] = (char)('0' + v % 10u); v /= 10u; } while (v && k < 8);
    while (k > 0) OPENREG_DTYPE_PUT_(digits[--k]);
    if (pass == 0) OPENREG_DTYPE_PUT_('_');
  }
#undef OPENREG_DTYPE_PUT_
  buf[n] = '\0';
  return n;
}

/* A buffer openreg_dtype_format never needs to cut: "code255_255x65535". */
#define OPENREG_DTYPE_NAME_MAX 32

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OPENREG_DTYPE_NAME_H_ */
