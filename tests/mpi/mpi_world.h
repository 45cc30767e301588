/* mpi_world.h: what every tests/mpi program shares: the contexts (one distributed context of 4
 * global devices spread over the 1, 2 or 4 ranks mpirun started, and single-process references
 * in the same process) and a main that runs a cmocka group on them, checks tjit's leaks before
 * MPI is finalized and never leaves a failed rank's peers waiting. */
#ifndef TJIT_TEST_MPI_WORLD_H
#define TJIT_TEST_MPI_WORLD_H

#include <stddef.h>

#include "tjit.h"

struct CMUnitTest;

enum { MW_DEVICES = 4 };         /* global devices of mw_dist, as many as mw_ref has */
extern int mw_rank, mw_ranks;    /* this process's rank, the number of ranks */
extern jit_ctx *mw_dist;         /* distributed: MW_DEVICES / mw_ranks devices per rank */
extern jit_ctx *mw_ref;          /* one process, MW_DEVICES devices */
extern jit_ctx *mw_one;          /* one process, one device: the unsharded reference */

/* A context of `devices` devices (global when distributed), one worker thread, mw_main's
   opt_level; fails the test on an error. */
jit_ctx *mw_ctx(int distributed, int devices);

/* Runs the group on the contexts above at opt_level (0: the interpreter on every device) (created
   here: tjit initializes MPI with the first distributed context and finalizes it with the last);
   returns main's exit status. */
int mw_main(const char *name, int opt_level, const struct CMUnitTest *tests, size_t n_tests);

#endif /* TJIT_TEST_MPI_WORLD_H */
