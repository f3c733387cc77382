// Forwards the runtime header's old spelling to format/file_io.h until Compile.cpp, which
// another change is editing, spells it so; then this folder goes.
#include "format/file_io.h"
