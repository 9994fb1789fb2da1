#include "engine_error.h"

#include <c10/util/Exception.h>

namespace openreg {

std::string engine_error_text(const std::string& engine, const std::string& op, const std::string& dtype_text,
                              const std::string& message) {
  return "openreg: engine '" + engine + "' failed on " + op + " (" + dtype_text + "): " + message;
}

[[noreturn]] void raise_engine_error(const std::string& engine, const std::string& op, const std::string& dtype_text,
                                     openreg_status status, const std::string& message) {
  raise_for_status(status, engine_error_text(engine, op, dtype_text, message));
}

[[noreturn]] void raise_for_status(openreg_status status, const std::string& text) {
  switch (status) {
    case OPENREG_STATUS_INDEX_ERROR:
      C10_THROW_ERROR(IndexError, text);
    case OPENREG_STATUS_TYPE_ERROR:
      C10_THROW_ERROR(TypeError, text);
    case OPENREG_STATUS_VALUE_ERROR:
      C10_THROW_ERROR(ValueError, text);
    case OPENREG_STATUS_NOT_IMPLEMENTED:
      C10_THROW_ERROR(NotImplementedError, text);
    case OPENREG_STATUS_LINALG_ERROR:
      C10_THROW_ERROR(LinAlgError, text);
    case OPENREG_STATUS_OUT_OF_MEMORY:
      C10_THROW_ERROR(OutOfMemoryError, text);
    default:
      C10_THROW_ERROR(Error, text);
  }
}

}  // namespace openreg
