// The Python line that enqueued an op (caller_location.cpp).
#pragma once

#include <string>

namespace openreg_python {

// Sets *file (interned, never freed) and *line to the innermost Python frame outside
// torch's and openreg's own files, if there is one; leaves them as they are otherwise.
void caller_location(const std::string** file, int* line);

}  // namespace openreg_python
