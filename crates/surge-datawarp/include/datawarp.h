/*
 * datawarp.h — Cray DataWarp's C API (libdatawarp), provided by Surge.
 *
 * The same functions, types and enum values as DataWarp's own header, so that a code written
 * for DataWarp builds and runs against a Surge instance unmodified:
 *
 *     cc app.c -I<surge>/include -L<surge>/lib -ldatawarp
 *
 * Every call is carried out by the instance's stage coordinator, the one `surge stage` and
 * libsurge (surge.h) talk to; the copies are made by the instance's servers in the background.
 *
 * Paths. A DataWarp path is a path on a Surge FUSE mount ("$DW_JOB_STRIPED/run/chk0010.h5"
 * where the job's mount is $DW_JOB_STRIPED), or, when the SURGE_INSTANCE environment variable
 * names an instance, an absolute path inside it ("/run/chk0010.h5"). PFS paths are absolute
 * or relative to the current directory.
 *
 * Results. As DataWarp: 0 (or, for dw_read_failed_stage, a length) on success, a negative
 * errno on failure. Of a path: -ENOENT when it does not exist in the instance, -EINVAL when
 * it exists but has no stage for the call to act on (or an argument is wrong). A stage that
 * failed is reported with the errno of its failure: -ENOENT for a source that was missing,
 * -EIO for a copy that failed. libdatawarp also exports libsurge's surge_last_error()
 * (surge.h), which says in words why this thread's last call failed. Calls are thread-safe.
 */
#ifndef SURGE_DATAWARP_H
#define SURGE_DATAWARP_H

#include <stdint.h>
#include <sys/types.h>

/* What a stage-out call asks for. The values are DataWarp's. */
enum dw_stage_type {
    /* Copy now, in the background. */
    DW_STAGE_IMMEDIATE = 0,
    /* Copy when the job ends: when `surge stage job-end` runs (the Slurm manager runs it as
     * the job ends) or when the instance is taken down. The source must exist now. */
    DW_STAGE_AT_JOB_END = 1,
    /* Drop the DW_STAGE_AT_JOB_END stages of this path that have not started (the PFS path
     * may be NULL). -EINVAL if it has none. */
    DW_REVOKE_STAGE_AT_JOB_END = 2,
    /* Start the DW_STAGE_AT_JOB_END stages of this path now (the PFS path may be NULL):
     * each is submitted again as an immediate stage of the same paths, and the deferred one
     * is dropped once the new one is under way. -EINVAL if it has none. */
    DW_ACTIVATE_DEFERRED_STAGE = 3,
    /* Not in DataWarp's header: a second spelling of DW_STAGE_AT_JOB_END, accepted alike. */
    DW_STAGE_AT_END_OF_JOB = DW_STAGE_AT_JOB_END
};

/* A walk over failed stages (dw_open_failed_stage). */
typedef struct dw_failed_stage_state dw_failed_stage_t;

#ifdef __cplusplus
extern "C" {
#endif

/* How many stages the instance of dw_instance_path (which must exist) should run at once.
 * Surge's coordinator has no such setting: the value is accepted and has no effect, which
 * DataWarp allows (its value may be constrained by the system without notice); returns 0. */
int dw_set_stage_concurrency(const char *dw_instance_path, unsigned int concurrent_stages);

/* PFS -> DataWarp, now, in the background. A file stage creates or truncates dw_file_path;
 * a directory stage copies the tree below pfs_directory into dw_directory. A missing source
 * fails the call itself (-ENOENT). */
int dw_stage_file_in(const char *dw_file_path, const char *pfs_file_path);
int dw_stage_directory_in(const char *dw_directory, const char *pfs_directory);
/* pfs_list: NULL-terminated array of PFS files, each staged into dw_directory under its own
 * name, as a file stage of its own (queried, waited for and terminated as such). */
int dw_stage_list_in(const char *dw_directory, const char **pfs_list);

/* DataWarp -> PFS, as stage_type says. A staged-out file appears on the PFS under its name
 * only once complete. */
int dw_stage_file_out(const char *dw_file_path, const char *pfs_file_path, enum dw_stage_type stage_type);
int dw_stage_directory_out(const char *dw_directory, const char *pfs_directory, enum dw_stage_type stage_type);
/* dw_list: NULL-terminated array of DataWarp files, each staged into pfs_directory under its
 * own name, as a file stage of its own. A failure stops at that file: the earlier ones stay
 * submitted. */
int dw_stage_list_out(const char **dw_list, const char *pfs_directory, enum dw_stage_type stage_type);

/* Counts of the stages of a path: complete, pending (queued or copying), deferred (waiting
 * for job end), failed. A path counts once, by its latest stage that was not terminated or
 * revoked, so a file query has at most one count at 1. The directory query covers every
 * stage submitted for the directory or for a path below it (a directory stage counts once,
 * as one stage); the list query adds up its files'. NULL counters are skipped. */
int dw_query_file_stage(const char *dw_file_path, int *complete, int *pending, int *deferred, int *failed);
int dw_query_directory_stage(const char *dw_directory_path, int *complete, int *pending, int *deferred, int *failed);
int dw_query_list_stage(const char **dw_list_path, int *complete, int *pending, int *deferred, int *failed);

/* The failed stages at or below dw_instance_path:
 *     dw_failed_stage_t *walk;
 *     if (dw_open_failed_stage(dir, &walk) == 0) {
 *         while ((n = dw_read_failed_stage(walk, path, sizeof path, &err)) > 0) ...;
 *         dw_close_failed_stage(walk);
 *     }
 * dw_read_failed_stage returns the length of the path it wrote (with its NUL in path_size),
 * 0 at the end, -ERANGE if the path does not fit (it is kept for the next call); *ret_errno
 * is the negated errno of the failure. Of a directory stage, each file that failed is listed.
 * A failure is no longer listed once its path was staged again (whatever came of that stage).
 * The list is read at open: later failures need a new walk. */
int dw_open_failed_stage(const char *dw_instance_path, dw_failed_stage_t **handle);
int dw_read_failed_stage(dw_failed_stage_t *handle, char *path, int path_size, int *ret_errno);
int dw_close_failed_stage(dw_failed_stage_t *handle);

/* Block until no stage of the path (the directory: of it and below it; the list: of each
 * file) is queued or copying. 0 if the latest one of each path completed; the failure's
 * errno if one failed; -ECANCELED if it was terminated. Stages deferred to job end are not
 * waited for. */
int dw_wait_file_stage(const char *dw_file_path);
int dw_wait_directory_stage(const char *dw_directory_path);
int dw_wait_list_stage(const char **dw_list);

/* Stop the stages of the path that are deferred, queued or copying. A copy under way stops
 * after the pieces in flight; nothing unfinished is published under its final name. */
int dw_terminate_file_stage(const char *dw_file_path);
int dw_terminate_directory_stage(const char *dw_directory_path);
int dw_terminate_list_stage(const char **dw_list);

/* A Surge instance has one stripe configuration, chosen when it is started: its chunk size,
 * over all its servers. dw_set_stripe_configuration checks its arguments as DataWarp does
 * (-EINVAL: a size that is 0 or not a multiple of 4096, a width of 0 or more than the
 * instance's servers; -EBADF / -EINVAL: fd is not an open file of a Surge mount) and
 * otherwise has no effect and returns 0.
 * dw_get_stripe_configuration answers, for an open file of a Surge mount: the chunk size,
 * the number of servers, and the server (0 .. width-1) holding the file's first chunk; for a
 * directory, the server its entries live on. A file of a node-local directory keeps every
 * chunk on the server its index names. */
int dw_set_stripe_configuration(int fd, int stripe_size, int stripe_width);
int dw_get_stripe_configuration(int fd, int *stripe_size, int *stripe_width, int *starting_index);

/* Surge spreads metadata over every server by itself: whatever the key, the path to use is
 * dw_root itself, returned as a copy to free(); NULL if dw_root is not a Surge path. */
char *dw_get_mds_path(const char *dw_root, uint64_t key);

/* Not provided by Surge: returns NULL with *ecode = -EOPNOTSUPP (`surge status` reports what
 * the instance's servers hold). */
char *dw_get_accounting_data_json(const char *path, int *ecode);

#ifdef __cplusplus
}
#endif

#endif /* SURGE_DATAWARP_H */
