// An engine's failure raised as the exception PyTorch raises for the same input:
// the ABI carries a status and a message (engine.h), the status picks the class.
#pragma once

#include <openreg/engine.h>

#include <string>

namespace openreg {

// Throws "openreg: engine '<engine>' failed on <op> (<dtype_text>): <message>" as
// the c10 error class of `status` (Python sees IndexError for INDEX_ERROR,
// TypeError, ValueError, NotImplementedError, torch.linalg.LinAlgError,
// torch.OutOfMemoryError; RuntimeError for every other status).
std::string engine_error_text(const std::string& engine, const std::string& op, const std::string& dtype_text,
                              const std::string& message);
// Throws `text` as the c10 error class of `status` (Python: IndexError, torch.OutOfMemoryError...).
[[noreturn]] void raise_for_status(openreg_status status, const std::string& text);
[[noreturn]] void raise_engine_error(const std::string& engine, const std::string& op, const std::string& dtype_text,
                                     openreg_status status, const std::string& message);

}  // namespace openreg
