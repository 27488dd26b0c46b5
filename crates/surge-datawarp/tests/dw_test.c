/*
 * Exercises libdatawarp as a DataWarp application would, against a live Surge instance and
 * its FUSE mount: stripe configuration, immediate, deferred, revoked, activated and
 * terminated stage-outs, the errors of paths with no stage, a stage whose source is missing
 * and the failed-stage walk, directory and list stages both ways, and the instance calls.
 *
 *   dw_test MOUNT_DIR PFS_DIR JOB_END_COMMAND     (exit status 0 = every check passed)
 *
 * JOB_END_COMMAND is run with system() where the job would end (`surge stage job-end --wait`).
 * Prints "stripe SIZE WIDTH INDEX INODE" for the caller to check against the instance.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <datawarp.h>

/* Not part of DataWarp's API: libsurge's, which libdatawarp also exports. */
const char *surge_last_error(void);

static int failures = 0;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, " (last error: %s)\n", surge_last_error());         \
            failures++;                                                         \
        }                                                                       \
    } while (0)

static void fill(char *buf, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (char)(seed >> 16);
    }
}

static int write_file(const char *path, const char *buf, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -errno;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0) { close(fd); return -errno; }
        done += (size_t)n;
    }
    return close(fd) == 0 ? 0 : -errno;
}

static int same_content(const char *path, const char *buf, size_t len) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char *back = malloc(len + 1);
    size_t n = fread(back, 1, len + 1, f);
    fclose(f);
    int same = n == len && memcmp(back, buf, len) == 0;
    free(back);
    return same;
}

/* A file of `len` bytes (content from `seed`) at MOUNT/name; its path in `bb`. */
static void make(char *bb, size_t size, const char *mnt, const char *name, size_t len, unsigned seed) {
    char *data = malloc(len);
    fill(data, len, seed);
    snprintf(bb, size, "%s/%s", mnt, name);
    CHECK(write_file(bb, data, len) == 0, "write %s", bb);
    free(data);
}

/* Whether the PFS file is `len` bytes of `seed`'s content. */
static int staged(const char *pfs, const char *name, size_t len, unsigned seed) {
    char path[4096];
    char *data = malloc(len);
    fill(data, len, seed);
    snprintf(path, sizeof path, "%s/%s", pfs, name);
    int same = same_content(path, data, len);
    free(data);
    return same;
}

static int on_pfs(const char *pfs, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", pfs, name);
    return access(path, F_OK) == 0;
}

/* The query's four counts, checked all at once. */
#define COUNTS(path, c, p, d, f)                                                                          \
    do {                                                                                                  \
        int c_ = -1, p_ = -1, d_ = -1, f_ = -1;                                                           \
        int rc_ = dw_query_file_stage(path, &c_, &p_, &d_, &f_);                                          \
        CHECK(rc_ == 0 && c_ == (c) && p_ == (p) && d_ == (d) && f_ == (f),                               \
              "query %s: rc %d counts %d %d %d %d, not %d %d %d %d", path, rc_, c_, p_, d_, f_, c, p, d, f); \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MOUNT_DIR PFS_DIR JOB_END_COMMAND\n", argv[0]);
        return 2;
    }
    const char *mnt = argv[1], *pfs = argv[2], *job_end = argv[3];
    char bb[4096], out[4096], path[4096];
    int rc, size = -1, width = -1, index = -1;

    /* Stripe configuration: of a file written through the mount, the instance's own. */
    make(bb, sizeof bb, mnt, "striped.dat", 700000, 1);
    int fd = open(bb, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0, "open %s", bb);
    CHECK(dw_get_stripe_configuration(fd, &size, &width, &index) == 0, "stripe configuration");
    CHECK(index >= 0 && index < width, "index %d of %d", index, width);
    printf("stripe %d %d %d %llu\n", size, width, index, (unsigned long long)st.st_ino);
    CHECK(dw_set_stripe_configuration(fd, size, width) == 0, "set the instance's own stripe");
    CHECK(dw_set_stripe_configuration(fd, size + 1, width) == -EINVAL, "a size not a multiple of 4 KiB");
    CHECK(dw_set_stripe_configuration(fd, size, width + 1) == -EINVAL, "wider than the instance");
    CHECK(dw_set_stripe_configuration(fd, size, 0) == -EINVAL, "no width");
    close(fd);
    int dir_fd = open(mnt, O_RDONLY | O_DIRECTORY);
    int dir_size = -1, dir_width = -1, dir_index = -1;
    CHECK(dw_get_stripe_configuration(dir_fd, &dir_size, &dir_width, &dir_index) == 0, "stripe of the root directory");
    CHECK(dir_size == size && dir_width == width && dir_index >= 0 && dir_index < width, "root: %d %d %d", dir_size, dir_width, dir_index);
    close(dir_fd);
    int not_surge = open("/dev/null", O_RDONLY);
    CHECK(dw_get_stripe_configuration(not_surge, &size, &width, &index) == -EINVAL, "a file off Surge");
    close(not_surge);
    CHECK(dw_get_stripe_configuration(-1, &size, &width, &index) == -EBADF, "no file");

    /* Immediate stage-out, as Chombo-Crunch's plot files: waited for, counted complete. */
    make(bb, sizeof bb, mnt, "chk0010.h5", 3 * 1024 * 1024 + 777, 42);
    snprintf(out, sizeof out, "%s/chk0010.h5", pfs);
    CHECK(dw_stage_file_out(bb, out, DW_STAGE_IMMEDIATE) == 0, "stage out");
    CHECK(dw_wait_file_stage(bb) == 0, "wait");
    CHECK(staged(pfs, "chk0010.h5", 3 * 1024 * 1024 + 777, 42), "PFS copy differs");
    COUNTS(bb, 1, 0, 0, 0);

    /* DataWarp's errors: a path with no stage (-EINVAL), a path that does not exist (-ENOENT). */
    make(bb, sizeof bb, mnt, "never-staged.dat", 10, 2);
    CHECK((rc = dw_query_file_stage(bb, NULL, NULL, NULL, NULL)) == -EINVAL, "query, no stage: %d", rc);
    CHECK((rc = dw_wait_file_stage(bb)) == -EINVAL, "wait, no stage: %d", rc);
    CHECK((rc = dw_terminate_file_stage(bb)) == -EINVAL, "terminate, no stage: %d", rc);
    CHECK((rc = dw_stage_file_out(bb, NULL, DW_REVOKE_STAGE_AT_JOB_END)) == -EINVAL, "revoke, no stage: %d", rc);
    CHECK((rc = dw_stage_file_out(bb, NULL, DW_ACTIVATE_DEFERRED_STAGE)) == -EINVAL, "activate, no stage: %d", rc);
    CHECK((rc = dw_stage_file_out(bb, NULL, DW_STAGE_IMMEDIATE)) == -EINVAL, "no PFS path: %d", rc);
    CHECK((rc = dw_stage_file_out(bb, out, (enum dw_stage_type)7)) == -EINVAL, "no such stage type: %d", rc);
    snprintf(bb, sizeof bb, "%s/no-such-file", mnt);
    CHECK((rc = dw_query_file_stage(bb, NULL, NULL, NULL, NULL)) == -ENOENT, "query, no file: %d", rc);
    CHECK((rc = dw_wait_file_stage(bb)) == -ENOENT, "wait, no file: %d", rc);
    CHECK((rc = dw_stage_file_out(bb, out, DW_STAGE_AT_JOB_END)) == -ENOENT, "defer, no file: %d", rc);
    CHECK(dw_wait_file_stage("/definitely/not/a/surge/path") == -EINVAL, "a path off every mount");

    /* Deferred to job end (both spellings), revoked, activated, terminated, source gone. */
    char a[4096], b[4096], r[4096], act[4096], t[4096], v[4096];
    make(a, sizeof a, mnt, "deferred-a.dat", 5000, 3);
    make(b, sizeof b, mnt, "deferred-b.dat", 6000, 4);
    make(r, sizeof r, mnt, "revoked.dat", 100, 5);
    make(act, sizeof act, mnt, "activated.dat", 300000, 6);
    make(t, sizeof t, mnt, "terminated.dat", 100, 7);
    make(v, sizeof v, mnt, "vanishing.dat", 100, 8);
    snprintf(out, sizeof out, "%s/deferred-a.dat", pfs);
    CHECK(dw_stage_file_out(a, out, DW_STAGE_AT_JOB_END) == 0, "defer a");
    snprintf(out, sizeof out, "%s/deferred-b.dat", pfs);
    CHECK(dw_stage_file_out(b, out, DW_STAGE_AT_END_OF_JOB) == 0, "defer b");
    snprintf(out, sizeof out, "%s/revoked.dat", pfs);
    CHECK(dw_stage_file_out(r, out, DW_STAGE_AT_JOB_END) == 0, "defer r");
    snprintf(out, sizeof out, "%s/activated.dat", pfs);
    CHECK(dw_stage_file_out(act, out, DW_STAGE_AT_JOB_END) == 0, "defer act");
    snprintf(out, sizeof out, "%s/terminated.dat", pfs);
    CHECK(dw_stage_file_out(t, out, DW_STAGE_AT_JOB_END) == 0, "defer t");
    snprintf(out, sizeof out, "%s/vanishing.dat", pfs);
    CHECK(dw_stage_file_out(v, out, DW_STAGE_AT_JOB_END) == 0, "defer v");
    COUNTS(a, 0, 0, 1, 0);
    COUNTS(b, 0, 0, 1, 0);
    CHECK(dw_wait_file_stage(a) == 0, "a wait does not wait for job end");

    CHECK(dw_stage_file_out(r, NULL, DW_REVOKE_STAGE_AT_JOB_END) == 0, "revoke");
    COUNTS(r, 0, 0, 0, 0);
    CHECK((rc = dw_stage_file_out(r, NULL, DW_REVOKE_STAGE_AT_JOB_END)) == -EINVAL, "revoke twice: %d", rc);

    CHECK(dw_stage_file_out(act, NULL, DW_ACTIVATE_DEFERRED_STAGE) == 0, "activate");
    CHECK(dw_wait_file_stage(act) == 0, "wait for the activated stage");
    CHECK(staged(pfs, "activated.dat", 300000, 6), "the activated stage did not copy before job end");
    COUNTS(act, 1, 0, 0, 0);

    CHECK(dw_terminate_file_stage(t) == 0, "terminate a deferred stage");
    COUNTS(t, 0, 0, 0, 0);
    CHECK(unlink(v) == 0, "unlink %s", v);

    CHECK(!on_pfs(pfs, "deferred-a.dat") && !on_pfs(pfs, "deferred-b.dat"), "a deferred stage ran before job end");
    /* The job ends: the deferred stages run, the vanished source's fails (so the command says so). */
    CHECK(system(job_end) != 0, "job end did not report the stage whose source vanished");
    CHECK(staged(pfs, "deferred-a.dat", 5000, 3), "deferred a not staged at job end");
    CHECK(staged(pfs, "deferred-b.dat", 6000, 4), "deferred b (DW_STAGE_AT_END_OF_JOB) not staged at job end");
    CHECK(!on_pfs(pfs, "revoked.dat") && !on_pfs(pfs, "terminated.dat"), "a revoked or terminated stage ran");
    COUNTS(a, 1, 0, 0, 0);
    CHECK(dw_wait_file_stage(a) == 0, "wait after job end");
    CHECK((rc = dw_wait_file_stage(v)) == -ENOENT, "wait for a stage whose source vanished: %d", rc);
    COUNTS(v, 0, 0, 0, 1);

    /* A stage whose source is missing fails the call, stays failed, and is listed. */
    char m[4096];
    snprintf(m, sizeof m, "%s/missing.dat", mnt);
    snprintf(out, sizeof out, "%s/missing.dat", pfs);
    CHECK((rc = dw_stage_file_out(m, out, DW_STAGE_IMMEDIATE)) == -ENOENT, "stage out a missing file: %d", rc);
    CHECK((rc = dw_wait_file_stage(m)) == -ENOENT, "wait for it: %d", rc);
    COUNTS(m, 0, 0, 0, 1);
    dw_failed_stage_t *walk = NULL;
    CHECK(dw_open_failed_stage(mnt, &walk) == 0 && walk != NULL, "open the failed stages");
    char tiny[4];
    int err = 0, listed_m = 0, listed_v = 0, n;
    CHECK(walk && dw_read_failed_stage(walk, tiny, sizeof tiny, &err) == -ERANGE, "a short buffer");
    while (walk && (n = dw_read_failed_stage(walk, path, sizeof path, &err)) > 0) {
        printf("failed stage: %s (%d)\n", path, err);
        CHECK(n == (int)strlen(path), "length %d of %s", n, path);
        if (strcmp(path, m) == 0) listed_m += err == -ENOENT;
        if (strcmp(path, v) == 0) listed_v += err == -ENOENT;
    }
    CHECK(walk && dw_close_failed_stage(walk) == 0, "close");
    CHECK(listed_m == 1 && listed_v == 1, "listed: missing %d, vanished %d", listed_m, listed_v);
    /* Staged again once it exists: no longer a failure. */
    make(m, sizeof m, mnt, "missing.dat", 2000, 9);
    CHECK(dw_stage_file_out(m, out, DW_STAGE_IMMEDIATE) == 0 && dw_wait_file_stage(m) == 0, "stage it again");
    COUNTS(m, 1, 0, 0, 0);
    listed_m = listed_v = 0;
    CHECK(dw_open_failed_stage(mnt, &walk) == 0, "open the failed stages again");
    while (dw_read_failed_stage(walk, path, sizeof path, &err) > 0) {
        listed_m += strcmp(path, m) == 0;
        listed_v += strcmp(path, v) == 0;
    }
    dw_close_failed_stage(walk);
    CHECK(listed_m == 0 && listed_v == 1, "after the restart: missing %d, vanished %d", listed_m, listed_v);

    /* A directory of plot files, out and waited for as a directory. */
    char dir[4096], name[64];
    snprintf(dir, sizeof dir, "%s/plots", mnt);
    CHECK(mkdir(dir, 0755) == 0, "mkdir plots");
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "plots/plt%04d.h5", i);
        make(bb, sizeof bb, mnt, name, 1000 + i, 100 + i);
    }
    snprintf(out, sizeof out, "%s/plots", pfs);
    CHECK(dw_stage_directory_out(dir, out, DW_STAGE_IMMEDIATE) == 0, "stage out a directory");
    CHECK(dw_wait_directory_stage(dir) == 0, "wait for the directory");
    CHECK(staged(pfs, "plots/plt0009.h5", 1009, 109), "a staged-out plot file differs");
    int c = -1, p = -1, d = -1, f = -1;
    CHECK(dw_query_directory_stage(dir, &c, &p, &d, &f) == 0 && c == 1 && p == 0 && d == 0 && f == 0,
          "directory counts %d %d %d %d", c, p, d, f);

    /* Lists: three files out into a PFS directory, two PFS files in. */
    const char *names[] = {"list0.dat", "list1.dat", "list2.dat"};
    char items[3][4096];
    for (int i = 0; i < 3; i++) make(items[i], sizeof items[i], mnt, names[i], 4000 + i, 200 + i);
    const char *list[] = {items[0], items[1], items[2], NULL};
    snprintf(out, sizeof out, "%s/listed", pfs);
    CHECK(mkdir(out, 0755) == 0, "mkdir %s", out);
    CHECK(dw_stage_list_out(list, out, DW_STAGE_IMMEDIATE) == 0, "stage a list out");
    CHECK(dw_wait_list_stage(list) == 0, "wait for the list");
    CHECK(dw_query_list_stage(list, &c, &p, &d, &f) == 0 && c == 3 && p == 0 && d == 0 && f == 0, "list counts %d %d %d %d", c, p, d, f);
    CHECK(staged(pfs, "listed/list2.dat", 4002, 202), "a listed file differs");
    char pfs_in[2][4096], dw_in[2][4096];
    char *data = malloc(70000);
    for (int i = 0; i < 2; i++) {
        snprintf(pfs_in[i], sizeof pfs_in[i], "%s/input%d.dat", pfs, i);
        fill(data, 70000, 300 + i);
        CHECK(write_file(pfs_in[i], data, 70000) == 0, "write %s", pfs_in[i]);
        snprintf(dw_in[i], sizeof dw_in[i], "%s/inputs/input%d.dat", mnt, i);
    }
    snprintf(dir, sizeof dir, "%s/inputs", mnt);
    CHECK(mkdir(dir, 0755) == 0, "mkdir inputs");
    const char *in_list[] = {pfs_in[0], pfs_in[1], NULL};
    const char *dw_list[] = {dw_in[0], dw_in[1], NULL};
    CHECK(dw_stage_list_in(dir, in_list) == 0, "stage a list in");
    CHECK(dw_wait_list_stage(dw_list) == 0, "wait for the list in");
    fill(data, 70000, 301);
    CHECK(same_content(dw_in[1], data, 70000), "a file staged in by list differs");

    /* A file and a directory in. */
    snprintf(bb, sizeof bb, "%s/restart.h5", mnt);
    CHECK(dw_stage_file_in(bb, pfs_in[0]) == 0 && dw_wait_file_stage(bb) == 0, "stage a file in");
    fill(data, 70000, 300);
    CHECK(same_content(bb, data, 70000), "the staged-in file differs");
    snprintf(bb, sizeof bb, "%s/plots-back", mnt);
    snprintf(out, sizeof out, "%s/plots", pfs);
    CHECK(dw_stage_directory_in(bb, out) == 0 && dw_wait_directory_stage(bb) == 0, "stage a directory in");
    snprintf(path, sizeof path, "%s/plots-back/plt0003.h5", mnt);
    fill(data, 1003, 103);
    CHECK(same_content(path, data, 1003), "a file of the staged-in directory differs");
    free(data);

    /* Directories with nothing to act on. */
    snprintf(dir, sizeof dir, "%s/empty", mnt);
    CHECK(mkdir(dir, 0755) == 0, "mkdir empty");
    CHECK(dw_query_directory_stage(dir, &c, &p, &d, &f) == 0 && c + p + d + f == 0, "an empty directory's counts");
    CHECK(dw_wait_directory_stage(dir) == 0, "wait, no stage in the directory");
    CHECK((rc = dw_terminate_directory_stage(dir)) == -EINVAL, "terminate, no stage in the directory: %d", rc);
    snprintf(dir, sizeof dir, "%s/no-such-dir", mnt);
    CHECK((rc = dw_query_directory_stage(dir, &c, &p, &d, &f)) == -ENOENT, "query, no directory: %d", rc);

    /* The whole instance: each path by its latest stage. Done: chk0010, deferred-a and -b,
     * activated, missing (restarted), plots, the three listed, the two listed in, restart.h5,
     * plots-back; failed: vanishing; revoked and terminated count nothing. */
    CHECK(dw_query_directory_stage(mnt, &c, &p, &d, &f) == 0 && c == 13 && p == 0 && d == 0 && f == 1,
          "instance counts %d %d %d %d", c, p, d, f);

    /* The instance calls. */
    CHECK(dw_set_stage_concurrency(mnt, 8) == 0, "stage concurrency");
    CHECK(dw_set_stage_concurrency("/definitely/not/a/surge/path", 8) == -EINVAL, "stage concurrency off Surge");
    char *mds = dw_get_mds_path(mnt, 42);
    CHECK(mds && strcmp(mds, mnt) == 0, "MDS path %s", mds ? mds : "(null)");
    free(mds);
    CHECK(dw_get_mds_path("/definitely/not/a/surge/path", 1) == NULL, "MDS path off Surge");
    int ecode = 0;
    CHECK(dw_get_accounting_data_json(mnt, &ecode) == NULL && ecode == -EOPNOTSUPP, "accounting: %d", ecode);

    if (failures == 0) printf("all libdatawarp checks passed\n");
    return failures == 0 ? 0 : 1;
}
