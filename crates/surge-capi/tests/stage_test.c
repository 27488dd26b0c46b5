/*
 * Exercises libsurge the way an application does: writes a checkpoint through the Surge mount
 * with plain POSIX calls, stages it out immediately, waits, checks the PFS copy; stages a
 * restart file in; defers and revokes a job-end stage; lists failed stages.
 *
 *   stage_test MOUNT_DIR PFS_DIR     (exit status 0 = every check passed)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "surge.h"

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

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MOUNT_DIR PFS_DIR\n", argv[0]);
        return 2;
    }
    const char *mnt = argv[1], *pfs = argv[2];
    char bb[4096], out[4096], in[4096];
    size_t len = 3 * 1024 * 1024 + 777; /* spans several chunks and servers */
    char *data = malloc(len);
    fill(data, len, 42);

    /* Checkpoint written through the mount, staged out immediately, as Chombo-Crunch does. */
    snprintf(bb, sizeof bb, "%s/chk0010.h5", mnt);
    snprintf(out, sizeof out, "%s/chk0010.h5", pfs);
    CHECK(write_file(bb, data, len) == 0, "write checkpoint into the mount");
    CHECK(surge_stage_file_out(bb, out, SURGE_STAGE_IMMEDIATE) == 0, "stage out");
    CHECK(surge_wait_file_stage(bb) == 0, "wait for stage out");
    CHECK(same_content(out, data, len), "PFS copy differs");
    int complete = -1, pending = -1, deferred = -1, failed = -1;
    CHECK(surge_query_file_stage(bb, &complete, &pending, &deferred, &failed) == 0, "query");
    CHECK(complete == 1 && pending == 0 && deferred == 0 && failed == 0, "counts %d %d %d %d", complete, pending, deferred, failed);

    /* Restart file staged in from the PFS, read back through the mount. */
    snprintf(in, sizeof in, "%s/restart.h5", pfs);
    fill(data, len, 7);
    CHECK(write_file(in, data, len) == 0, "write restart file on the PFS");
    snprintf(bb, sizeof bb, "%s/restart.h5", mnt);
    CHECK(surge_stage_file_in(bb, in) == 0, "stage in");
    CHECK(surge_wait_file_stage(bb) == 0, "wait for stage in");
    CHECK(same_content(bb, data, len), "staged-in file differs through the mount");

    /* A missing source fails at once with ENOENT and a message. */
    int rc = surge_stage_file_in(bb, "/nonexistent/restart.h5");
    CHECK(rc == -ENOENT, "missing source gave %d", rc);
    CHECK(strstr(surge_last_error(), "nonexistent") != NULL, "message does not name the path: %s", surge_last_error());

    /* Job-end stage: deferred until revoked. */
    snprintf(bb, sizeof bb, "%s/chk0010.h5", mnt);
    snprintf(out, sizeof out, "%s/at-job-end.h5", pfs);
    CHECK(surge_stage_file_out(bb, out, SURGE_STAGE_AT_JOB_END) == 0, "job-end stage");
    CHECK(surge_query_file_stage(bb, &complete, &pending, &deferred, &failed) == 0 && deferred == 1, "deferred %d", deferred);
    CHECK(surge_stage_file_out(bb, out, SURGE_REVOKE_STAGE_AT_JOB_END) == 0, "revoke");
    CHECK(surge_query_file_stage(bb, &complete, &pending, &deferred, &failed) == 0 && deferred == 0, "deferred after revoke %d", deferred);
    CHECK(access(out, F_OK) != 0, "a deferred stage ran early");

    /* A directory of plot files staged out; then one that cannot be written is listed as failed. */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/plots", mnt);
    CHECK(mkdir(dir, 0755) == 0, "mkdir plots");
    for (int i = 0; i < 20; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/plt%04d.h5", dir, i);
        fill(data, 1000 + i, (unsigned)i);
        CHECK(write_file(p, data, 1000 + i) == 0, "write plot file");
    }
    snprintf(out, sizeof out, "%s/plots", pfs);
    CHECK(surge_stage_dir_out(dir, out, SURGE_STAGE_IMMEDIATE) == 0, "stage out directory");
    CHECK(surge_wait_dir_stage(dir) == 0, "wait for directory");
    snprintf(in, sizeof in, "%s/plots/plt0019.h5", pfs);
    fill(data, 1019, 19);
    CHECK(same_content(in, data, 1019), "staged-out plot file differs");

    snprintf(bb, sizeof bb, "%s/plots/plt0003.h5", mnt);
    /* It fails either at submission or while it runs: either way the caller hears of it. */
    rc = surge_stage_file_out(bb, "/proc/surge-cannot-write-here/plt0003.h5", SURGE_STAGE_IMMEDIATE);
    if (rc == 0) rc = surge_wait_file_stage(bb);
    CHECK(rc < 0, "a stage to an unwritable place did not fail");
    CHECK(surge_wait_file_stage(bb) == -EIO, "wait on a failed stage");
    surge_failed_stages *f = surge_open_failed_stage(dir);
    CHECK(f != NULL, "open failed stages");
    char path[4096];
    char tiny[4];
    int listed = 0;
    /* A path that does not fit is refused and kept: the bigger buffer below still gets it. */
    CHECK(f && surge_next_failed_stage(f, tiny, sizeof tiny) == -ERANGE, "a short buffer");
    while (f && surge_next_failed_stage(f, path, sizeof path) == 1) {
        printf("failed stage: %s\n", path);
        listed += strcmp(path, bb) == 0;
    }
    surge_close_failed_stage(f);
    CHECK(listed == 1, "the failed stage was listed %d times", listed);
    CHECK(surge_terminate_file_stage("/definitely/not/a/surge/path") == -EINVAL, "path outside any mount");

    free(data);
    if (failures == 0) printf("all libsurge checks passed\n");
    return failures == 0 ? 0 : 1;
}
