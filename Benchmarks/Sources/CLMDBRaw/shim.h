#ifndef STRATA_BENCHMARKS_CLMDBRAW_SHIM_H
#define STRATA_BENCHMARKS_CLMDBRAW_SHIM_H

// LMDB's C API for the raw baselines (Debian liblmdb-dev; pkg-config "lmdb").
#include <lmdb.h>

#endif
