// Forwards the runtime header's old spelling to format/format.h until Compile.cpp, which
// another change is editing, spells it so; then this folder goes.
#include "format/format.h"
