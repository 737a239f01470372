/* kiln/kiln.h - umbrella header: everything public in libkiln and libkiln_rt. */
#ifndef KILN_KILN_H
#define KILN_KILN_H
#include "kiln/common.h"
#include "kiln/kernel.h"
#include "kiln/gen.h"
#include "kiln/target.h"
#include "kiln/lint.h"
#include "kiln/runtime.h"
#include "kiln/emu.h"
#endif
