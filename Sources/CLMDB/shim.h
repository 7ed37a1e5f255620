#ifndef STRATA_CLMDB_SHIM_H
#define STRATA_CLMDB_SHIM_H

// Debian's liblmdb-dev installs lmdb.h and liblmdb.so; pkg-config "lmdb" finds them.
#include <lmdb.h>

#endif
