/*
 * fti.h: the public C API of FTI (the Fault Tolerance Interface, 1.x) implemented over Cairn.
 *
 * Applications written against FTI compile against this header unchanged and link with
 * -lfti (libfti.so, which needs libcairn.so). Written from FTI's documented API; what maps to
 * what and what differs is in docs/migrate-fti.md. In short:
 *
 *   FTI_Init        reads FTI's configuration file, sets the Cairn keys that have an FTI
 *                   equivalent, reports every other setting once on stderr, starts Cairn over
 *                   the communicator and looks for a checkpoint to restart from.
 *   FTI_Protect     protects a region (FTI's basic types map to Cairn's element types).
 *   FTI_Checkpoint  writes a checkpoint; level 4 also waits until it is on the global tier.
 *   FTI_Status, FTI_Recover, FTI_Snapshot, FTI_Finalize as FTI documents them.
 *
 * Every function returns FTI_SCES (FTI_DONE where a checkpoint was written) or FTI_NSCS, and
 * prints why on stderr (lines starting with "fti: "). The library never aborts, exits or calls
 * MPI_Abort. Functions marked "collective" must be called by every rank of the communicator
 * given to FTI_Init, in the same order.
 */
#ifndef FTI_H
#define FTI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. Compare with the names; the values are FTI's. */
#define FTI_SCES 0    /* success */
#define FTI_NSCS (-1) /* failure (the reason is printed on stderr) */
#define FTI_NREC (-2) /* FTI_Init / FTI_Recover: a restart is expected, nothing can be recovered */
#define FTI_DONE 1    /* FTI_Checkpoint / FTI_Snapshot: a checkpoint was written */
#define FTI_HEAD 2    /* FTI_Init on a head process: never returned (Cairn runs no heads) */

/* Sizes FTI's headers define, which applications use for their own buffers. */
#define FTI_BUFS 256
#define FTI_WORD 16
/* The value FTI's own test programs write into the end of their data. */
#define FTI_ENDW 995

/* Status of a staging request (FTI_GetStageStatus). */
#define FTI_SI_FAIL 0x4
#define FTI_SI_SCES 0x3
#define FTI_SI_ACTV 0x2
#define FTI_SI_PEND 0x1
#define FTI_SI_NINI 0x0

/* Checkpoint levels. The differential and HDF5 levels are FTI's file formats, which Cairn
 * does not write: as in FTI, FTI_L1_DCP .. FTI_L3_DCP are levels 1 to 3, and FTI_L4_DCP and
 * FTI_L4_H5_SINGLE are level 4. */
typedef enum {
    FTI_L1 = 1,
    FTI_L2,
    FTI_L3,
    FTI_L4,
    FTI_L1_DCP,
    FTI_L2_DCP,
    FTI_L3_DCP,
    FTI_L4_DCP,
    FTI_L4_H5_SINGLE,
    FTI_MIN_LEVEL_ID = FTI_L1,
    FTI_MAX_LEVEL_ID = FTI_L4_H5_SINGLE
} FTIT_level;

/* Dimension lengths of FTI's dataset calls. */
typedef int64_t FTIT_hsize_t;

/* An HDF5 group of FTI's dataset layout. Cairn does not write HDF5: a group only names
 * itself (FTI_InitGroup); the calls that use it are accepted where they do not change what
 * is stored. */
typedef struct FTIT_H5Group {
    int id;
    char name[FTI_BUFS];
    int childrenNo;
    int parentId;
} FTIT_H5Group;

/* FTI's allocation helper, which its headers define for applications. */
#ifndef talloc
#define talloc(type, num) (type *)malloc(sizeof(type) * ((size_t)(num)))
#endif

/* A data type handle: one of the basic types below or a handle from FTI_InitType. */
typedef int fti_id_t;
/* The name FTI releases before 1.5 gave to type handles. */
typedef fti_id_t FTIT_type;

/* FTI's basic types. Stored with Cairn's matching element type where there is one (so
 * compression can shuffle their bytes), as bytes otherwise. */
#define FTI_CHAR ((fti_id_t)0)  /* char */
#define FTI_SHRT ((fti_id_t)1)  /* short */
#define FTI_INTG ((fti_id_t)2)  /* int */
#define FTI_LONG ((fti_id_t)3)  /* long */
#define FTI_UCHR ((fti_id_t)4)  /* unsigned char */
#define FTI_USHT ((fti_id_t)5)  /* unsigned short */
#define FTI_UINT ((fti_id_t)6)  /* unsigned int */
#define FTI_ULNG ((fti_id_t)7)  /* unsigned long */
#define FTI_SFLT ((fti_id_t)8)  /* float */
#define FTI_DBLE ((fti_id_t)9)  /* double */
#define FTI_LDBE ((fti_id_t)10) /* long double */

/*
 * The communicator the application uses instead of MPI_COMM_WORLD after FTI_Init: a
 * duplicate of the communicator given to FTI_Init (Cairn runs no dedicated head processes, so
 * it holds every rank). It stays valid after FTI_Finalize, until MPI_Finalize or the next
 * FTI_Init. MPI_COMM_WORLD before the first FTI_Init.
 */
extern MPI_Comm FTI_COMM_WORLD;

/*
 * Start FTI. Collective over globalComm.
 *   configFile [IN] FTI's configuration file (INI: [basic], [restart], [advanced], ...), or
 *                   NULL for none (Cairn's configuration and CAIRN_* variables only)
 *   globalComm [IN] an intra-communicator of the initialised MPI library
 * Returns FTI_SCES, or FTI_NSCS on every rank if the file is missing, unreadable or invalid,
 * or Cairn cannot start. FTI_Status() then says whether a checkpoint can be recovered.
 */
int FTI_Init(const char *configFile, MPI_Comm globalComm);

/*
 * The recovery status, fixed by FTI_Init. Local.
 * Returns 0 when there is nothing to recover (a first run, after FTI_Recover, or after a run
 * that ended with FTI_Finalize), 1 when a checkpoint of a run that did not finish can be
 * recovered, 2 when the previous run finished with Keep_last_ckpt = 1 and kept its last
 * checkpoint for recovery.
 */
int FTI_Status(void);

/*
 * Define a data type of `size` bytes (stored as bytes). Local.
 * Two forms, chosen by the number of arguments:
 *   fti_id_t t = FTI_InitType(size);   FTI 1.5 and later: the handle, or FTI_NSCS
 *   FTI_InitType(&t, size);            earlier releases: FTI_SCES or FTI_NSCS, handle in *t
 */
fti_id_t(FTI_InitType)(int size);
int cairn_fti_init_type_ptr(fti_id_t *type, int size);
#define FTI_INITTYPE_PICK_(a1, a2, fn, ...) fn
#define FTI_InitType(...) \
    FTI_INITTYPE_PICK_(__VA_ARGS__, cairn_fti_init_type_ptr, FTI_InitType, unused)(__VA_ARGS__)

/*
 * Protect `count` elements of type `type` at `ptr` under `id`; protecting an id again updates
 * its pointer, count and type (after a realloc). Local.
 *   id    [IN] the application's id for the region (any int)
 *   ptr   [IN] the data; it must stay valid until FTI_Finalize or the id is protected again
 *   count [IN] number of elements (>= 0; FTI's int32_t or long counts convert implicitly)
 *   type  [IN] a basic type or a handle from FTI_InitType
 */
int FTI_Protect(int id, void *ptr, int64_t count, fti_id_t type);

/*
 * Write a checkpoint of every protected region. Collective.
 *   id    [IN] the application's checkpoint id (any int; Cairn numbers versions itself)
 *   level [IN] 1 (node-local), 2 (partner copy), 3 (Reed-Solomon encoding) or 4 (global tier:
 *              returns once the checkpoint is durable there)
 * Levels 1 to 3 all get the redundancy scheme chosen at FTI_Init from the configuration's
 * Ckpt_L2 / Ckpt_L3; a level 2 or 3 checkpoint without one is made durable like level 4.
 * Returns FTI_DONE, or FTI_NSCS on every rank.
 */
int FTI_Checkpoint(int id, int level);

/*
 * Restore every protected region from the checkpoint FTI_Status offers (or, if it is damaged,
 * the newest older one every rank can restore). Collective. Returns FTI_SCES (FTI_Status() is
 * then 0), or FTI_NSCS on every rank.
 */
int FTI_Recover(void);

/*
 * Call once per iteration. On a restart the first call recovers (as FTI_Recover); afterwards
 * a call writes a checkpoint when the interval of a level (Ckpt_L1..Ckpt_L4, in minutes) has
 * passed, at the highest level due. The ranks agree on the time now and then (at most every
 * Max_sync_intv calls). Collective.
 * Returns FTI_DONE when it wrote a checkpoint, FTI_SCES otherwise, FTI_NSCS on failure.
 */
int FTI_Snapshot(void);

/*
 * Finish: record that the run ended (so the next run starts afresh, or with Keep_last_ckpt = 1
 * may recover the last checkpoint), wait for background flushes and stop Cairn. Collective.
 * Call it before MPI_Finalize. Returns FTI_SCES or FTI_NSCS.
 */
int FTI_Finalize(void);

/* ---- Variables one by one, by name, by size ---------------------------------------------- */

/*
 * The stored size in bytes of variable id in the checkpoint a restart will recover (0 when
 * no restart is pending, or the checkpoint holds no such variable). Local.
 */
int64_t FTI_GetStoredSize(int id);

/*
 * During a pending restart: reallocate ptr (protected as variable id) to the stored size of
 * id, protect it again with that size, and return the new pointer (NULL if the memory cannot
 * be had; ptr is then still valid and protected). Otherwise ptr, unchanged. Local.
 */
void *FTI_Realloc(int id, void *ptr);

/* Read the checkpoint to recover into memory, for FTI_RecoverVar. Collective. */
int FTI_RecoverVarInit(void);

/* Restore protected variable id from what FTI_RecoverVarInit read. Local. */
int FTI_RecoverVar(int id);

/* End the recovery of variables one by one: the restart is done (FTI_Status() is 0).
 * Collective. */
int FTI_RecoverVarFinalize(void);

/* The id of variable `name`, given a new one (0, 1, ...) when name is new. The names are
 * stored with the checkpoints, so a restart finds the same ids. Local. */
int FTI_setIDFromString(const char *name);

/* The id of variable `name`, or -1. Local. */
int FTI_getIDFromString(const char *name);

/* ---- Incremental checkpoints (variables added as they are ready) ------------------------ */

/*
 * Begin checkpoint id at level; with activate false the checkpoint is not taken and the next
 * FTI_AddVarICP / FTI_FinalizeICP calls do nothing. Collective.
 */
int FTI_InitICP(int id, int level, bool activate);

/* Add protected variable varID to the checkpoint begun, as it is now (its bytes are copied:
 * it may change before FTI_FinalizeICP). Local. */
int FTI_AddVarICP(int varID);

/* Write the checkpoint begun; every protected variable must have been added, on every rank.
 * Collective. */
int FTI_FinalizeICP(void);

/* ---- Composite types ---------------------------------------------------------------------- */

/* A type of `size` bytes named `name` (h5g: its HDF5 group, may be NULL). Its fields (below)
 * describe it for HDF5 output, which Cairn does not write; they are checked and kept. */
fti_id_t FTI_InitCompositeType(const char *name, size_t size, FTIT_H5Group *h5g);
int FTI_AddScalarField(fti_id_t id, const char *name, fti_id_t fid, int64_t offset);
int FTI_AddVectorField(fti_id_t id, const char *name, fti_id_t tid, int64_t offset, int ndims,
                       int64_t *dim_sizes);

/* An HDF5 group, for the calls above. */
int FTI_InitGroup(FTIT_H5Group *h5group, const char *name, FTIT_H5Group *parent);
int FTI_RenameGroup(FTIT_H5Group *h5group, const char *name);

/* ---- Staging: files copied to the global directory --------------------------------------- */

/* This rank's staging directory (created, private to the user), into stageDir. Local. */
int FTI_GetStageDir(char *stageDir, int maxLen);

/* Copy the file lpath to rpath (synced, then renamed into place); returns a request id >= 0
 * for FTI_GetStageStatus, or FTI_NSCS. Local. */
int FTI_SendFile(const char *lpath, const char *rpath);

/* FTI_SI_SCES or FTI_SI_FAIL for a request of FTI_SendFile, FTI_SI_NINI for an unknown id. */
int FTI_GetStageStatus(int ID);

/* ---- FTI_GetConfig: the configuration file as FTI reads it ------------------------------- */

/* I/O modes of [basic] Ckpt_io (1000 + its value), in FTIT_configuration.ioMode. Cairn
 * writes its own files whichever is chosen. */
#define FTI_IO_POSIX 1001
#define FTI_IO_MPI 1002
#define FTI_IO_FTIFF 1003
#define FTI_IO_SIONLIB 1004
#define FTI_IO_HDF5 1005

/* The members of FTI's structures that come from the configuration file and the
 * communicator, under FTI's names (FTI's own structures hold its internal state too, which
 * has no meaning here and is not provided). */
typedef struct FTIT_configuration {
    bool stagingEnabled; /* [basic] enable_staging */
    bool dcpPosix;       /* [basic] enable_dcp with Ckpt_io 1 */
    bool dcpFtiff;       /* [basic] enable_dcp with Ckpt_io 3 */
    bool keepL4Ckpt;     /* [basic] keep_l4_ckpt */
    bool keepHeadsAlive; /* [basic] keep_heads_alive */
    int dcpMode;         /* [basic] dcp_mode + 1 (as FTI) */
    int dcpBlockSize;    /* [basic] dcp_block_size */
    char cfgFile[FTI_BUFS];
    int saveLastCkpt;    /* [basic] keep_last_ckpt */
    int verbosity;       /* [basic] verbosity */
    int blockSize;       /* [advanced] block_size, in bytes */
    int transferSize;    /* [advanced] transfer_size, in bytes */
    int ckptTag, stageTag, finalTag, generalTag; /* [advanced] *_tag */
    int test;            /* [advanced] local_test */
    int l3WordSize;      /* FTI_WORD */
    int ioMode;          /* FTI_IO_*; -1 when the file could not be read */
    bool h5SingleFileEnable, h5SingleFileKeep, h5SingleFileIsInline;
    char h5SingleFileDir[FTI_BUFS];
    char h5SingleFilePrefix[FTI_BUFS];
    char stageDir[FTI_BUFS];
    char localDir[FTI_BUFS]; /* [basic] ckpt_dir */
    char glbalDir[FTI_BUFS]; /* [basic] glbl_dir */
    char metadDir[FTI_BUFS]; /* [basic] meta_dir */
} FTIT_configuration;

typedef struct FTIT_execution {
    char id[FTI_BUFS]; /* [restart] exec_id */
    int reco;          /* [restart] failure */
    int syncIterMax;   /* [basic] max_sync_intv */
} FTIT_execution;

typedef struct FTIT_topology {
    int nbProc;    /* ranks of the communicator */
    int nbNodes;   /* nbProc / nodeSize */
    int myRank;    /* this rank */
    int splitRank; /* this rank (Cairn runs no heads) */
    int splitSize;
    int nodeSize;  /* [basic] node_size */
    int nbHeads;   /* [basic] head */
    int nbApprocs; /* nodeSize - nbHeads */
    int groupSize; /* [basic] group_size */
    int nodeID;    /* myRank / nodeSize */
    int nodeRank;  /* myRank % nodeSize */
} FTIT_topology;

typedef struct FTIT_checkpoint {
    char dir[FTI_BUFS]; /* levels 1-3: ckpt_dir; level 4: glbl_dir */
    int isInline;       /* [basic] inline_l2 .. inline_l4 (level 1: 1) */
    int ckptIntv;       /* [basic] ckpt_l1 .. ckpt_l4, in minutes */
    int ckptDcpIntv;    /* [basic] dcp_l4 (level 4) */
} FTIT_checkpoint;

typedef struct FTIT_injection {
    int rank, index, position, number, frequency; /* [injection] */
} FTIT_injection;

typedef struct {
    FTIT_configuration configuration;
    FTIT_execution execution;
    FTIT_topology topology;
    FTIT_checkpoint checkpoint[5]; /* levels 1..4; [0] unused */
    FTIT_injection injection;
} FTIT_allConfiguration;

/* The configuration file `configFile` as FTI reads it, for the calling rank of globalComm.
 * configuration.ioMode is -1 when the file cannot be read (the reason is printed). Local
 * (globalComm's size and rank only). */
FTIT_allConfiguration FTI_GetConfig(const char *configFile, MPI_Comm globalComm);

#ifdef __cplusplus
}
#endif

#endif /* FTI_H */
