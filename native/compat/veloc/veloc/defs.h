/*
 * veloc/defs.h: the return codes, limits and mode values of VeloC's C and C++ APIs
 * (veloc.h, veloc.hpp), as implemented by Cairn.
 */
#ifndef VELOC_DEFS_H
#define VELOC_DEFS_H

#define VELOC_SUCCESS (0)
#define VELOC_FAILURE (-1)

/* Size of the buffer VELOC_Route_file writes the routed path into (a path always fits). */
#define VELOC_MAX_NAME 4096

/* Modes of VELOC_Recover_selective. */
#define VELOC_RECOVER_ALL 0  /* every region of the checkpoint (ids is ignored) */
#define VELOC_RECOVER_SOME 1 /* the regions named in ids */
#define VELOC_RECOVER_REST 2 /* every region except those named in ids */

/* Modes of VELOC_Checkpoint_selective. */
#define VELOC_CKPT_ALL 0
#define VELOC_CKPT_SOME 1
#define VELOC_CKPT_REST 2

/* Observer types of the C++ client (veloc::client_t::register_observer). */
#define VELOC_OBSERVE_CKPT_END 0

#endif /* VELOC_DEFS_H */
