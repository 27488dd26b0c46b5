/*
 * surge.h — the C API of Surge, a job-scoped burst buffer for HPC (libsurge).
 *
 * Staging between the parallel file system (PFS) and a Surge instance, callable from an
 * application, with the semantics of Cray DataWarp's libdatawarp: a code that calls
 * dw_stage_file_out(bb_path, pfs_path, DW_STAGE_IMMEDIATE) ports by renaming the call to
 * surge_stage_file_out(bb_path, pfs_path, SURGE_STAGE_IMMEDIATE).
 *
 * Burst-buffer paths are paths on a Surge FUSE mount (e.g. "$SURGE_MOUNT/run/chk0010.h5"), or,
 * when the SURGE_INSTANCE environment variable names an instance, paths inside it ("/run/chk0010.h5").
 * PFS paths are absolute or relative to the current directory. The copies are done by the
 * instance's servers, in parallel and in the background; a staged-out file appears on the PFS
 * under its final name only when complete.
 *
 * Every call returns 0 on success or a negative errno (-ENOENT: no such source or no stage of
 * that path; -EIO: a stage failed; -ECANCELED: it was terminated; -EINVAL: bad arguments);
 * surge_last_error() then describes the failure. Calls are thread-safe.
 *
 * Link with -lsurge.
 */
#ifndef SURGE_H
#define SURGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* When a stage-out happens. */
enum surge_stage_type {
    SURGE_STAGE_IMMEDIATE = 0,          /* now, in the background */
    SURGE_STAGE_AT_JOB_END = 1,         /* when the job ends (the instance's teardown waits for it) */
    SURGE_REVOKE_STAGE_AT_JOB_END = 2   /* drop an earlier SURGE_STAGE_AT_JOB_END request for this path */
};

/* PFS -> burst buffer, immediately. */
int surge_stage_file_in(const char *bb_path, const char *pfs_path);
int surge_stage_dir_in(const char *bb_dir, const char *pfs_dir);
/* pfs_list: a text file of "PFS_SOURCE BB_DESTINATION" lines; relative destinations are under bb_dir. */
int surge_stage_list_in(const char *bb_dir, const char *pfs_list);

/* Burst buffer -> PFS. */
int surge_stage_file_out(const char *bb_path, const char *pfs_path, enum surge_stage_type type);
int surge_stage_dir_out(const char *bb_dir, const char *pfs_dir, enum surge_stage_type type);
/* pfs_list: a text file of "BB_SOURCE PFS_DESTINATION" lines; relative sources are under bb_dir. */
int surge_stage_list_out(const char *bb_dir, const char *pfs_list, enum surge_stage_type type);

/* How many stages of this path are complete, pending (queued or running), deferred to job end, failed. */
int surge_query_file_stage(const char *bb_path, int *complete, int *pending, int *deferred, int *failed);
int surge_query_dir_stage(const char *bb_dir, int *complete, int *pending, int *deferred, int *failed);
int surge_query_list_stage(const char *bb_dir, int *complete, int *pending, int *deferred, int *failed);

/* Block until no stage of this path is pending. 0 if they all completed, -EIO if one failed. */
int surge_wait_file_stage(const char *bb_path);
int surge_wait_dir_stage(const char *bb_dir);
int surge_wait_list_stage(const char *bb_dir);

/* Stop the pending stages of this path; nothing unfinished is published. */
int surge_terminate_file_stage(const char *bb_path);
int surge_terminate_dir_stage(const char *bb_dir);
int surge_terminate_list_stage(const char *bb_dir);

/* The burst-buffer paths of failed stages at or below bb_dir, one at a time:
 *   surge_failed_stages *f = surge_open_failed_stage(dir);
 *   while (surge_next_failed_stage(f, path, sizeof path) == 1) ...;
 *   surge_close_failed_stage(f);
 * surge_open_failed_stage returns NULL (and sets errno) on error; surge_next_failed_stage returns
 * 1 with a path, 0 at the end, -ERANGE if the path does not fit (it is kept: call again with
 * a bigger buffer). */
typedef struct surge_failed_stages surge_failed_stages;
surge_failed_stages *surge_open_failed_stage(const char *bb_dir);
int surge_next_failed_stage(surge_failed_stages *failed, char *path, size_t size);
void surge_close_failed_stage(surge_failed_stages *failed);

/* Workflow coupling (docs/workflow.md). A file is published in its directory when a handle
 * that wrote it is closed, or when it is renamed or linked into it; never while being written.
 *
 * Following a directory's publications, in order, resumable from a cursor:
 *   surge_watch *w;
 *   surge_watch_open("/mnt/bb/out", "plt*.h5", 0, &w);     (pattern NULL: every name not
 *                                                          starting with '.'; cursor 0: from
 *                                                          the oldest the log holds)
 *   while (surge_watch_next(w, -1, path, sizeof path, &cursor, &size) == 0) ...;
 *   surge_watch_close(w);
 * surge_watch_next waits up to timeout_ms (-1: for ever) and returns -ETIMEDOUT when nothing
 * came, -ERANGE if the path does not fit (the publication is kept: the next call hands the
 * same one again, so call again with a bigger buffer; cursor and file_size are not written);
 * size is UINT64_MAX when not known. */
typedef struct surge_watch surge_watch;
int surge_watch_open(const char *dir, const char *pattern, uint64_t from_cursor, surge_watch **out);
int surge_watch_next(surge_watch *watch, int timeout_ms, char *path, size_t size, uint64_t *cursor, uint64_t *file_size);
void surge_watch_close(surge_watch *watch);

/* Consumer groups: each file published in dir that matches the group's pattern (set by the
 * group's first claim; NULL: '*') is handed to one consumer at a time, for lease_seconds; not
 * acknowledged by then, it goes back to the group. surge_queue_claim waits up to timeout_ms
 * (-1: for ever; -ETIMEDOUT then) and writes the file's path and the claim's token.
 * -ERANGE if the path does not fit: with no room for even "dir/x", nothing is claimed; else
 * the claim is kept for this process (the group's consumer, as the instance sees it) and the
 * next surge_queue_claim of the same dir (spelt the same) and group hands that same file and
 * token at once, without waiting, as long as its lease (counted from the first call) lasts:
 * call again with a bigger buffer. A kept claim no call takes goes back to the group when its
 * lease runs out, like any claim not acknowledged.
 * surge_queue_done acknowledges it (group NULL: the one group holding it; token 0: whichever
 * claim holds it, else only that claim: -ENOENT if its lease ran out and it went to another). */
int surge_queue_claim(const char *dir, const char *group, const char *pattern, double lease_seconds, int timeout_ms,
                      char *path, size_t size, uint64_t *token);
int surge_queue_done(const char *path, const char *group, uint64_t token);

/* A group's counts (produced = done + claimed + backlog; expired: claims whose lease ran out)
 * and its production and consumption rates over the last minute, files per second; kappa is
 * their ratio. -ENOENT if dir has no such group. */
typedef struct {
    uint64_t produced, claimed, done, backlog, expired;
    double production_per_s, consumption_per_s;
} surge_queue_counts;
int surge_queue_status(const char *dir, const char *group, surge_queue_counts *out);

/* What went wrong in this thread's last failed call ("" if none). Valid until the next call. */
const char *surge_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* SURGE_H */
