/* libsurge's workflow calls from C, against a live instance mounted at argv[1]: a watch
 * sees files published through the mount in order (not a temporary name, not a file still
 * being written), resumes from a cursor, times out cleanly; a consumer group hands each
 * file out once and takes the acknowledgement; a path that does not fit the buffer given
 * (-ERANGE) loses neither a publication nor a claim. Prints "all workflow checks passed". */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "surge.h"

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                  \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, " (last error: %s)\n", surge_last_error());                      \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static void publish(const char *dir, const char *name, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
    char block[4096];
    memset(block, 'x', sizeof block);
    for (size_t done = 0; done < len; done += sizeof block) {
        size_t n = len - done < sizeof block ? len - done : sizeof block;
        CHECK(write(fd, block, n) == (ssize_t)n, "write %s", path);
    }
    CHECK(close(fd) == 0, "close %s", path);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: workflow_test MOUNT_DIR");
    char dir[1024], path[4096], small[8];
    snprintf(dir, sizeof dir, "%s/flow", argv[1]);
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s: %s", dir, strerror(errno));

    surge_watch *w = NULL;
    CHECK(surge_watch_open(dir, "*.h5", 0, &w) == 0 && w, "surge_watch_open");
    uint64_t cursor = 0, size = 0, first = 0;
    CHECK(surge_watch_next(w, 200, path, sizeof path, &cursor, &size) == -ETIMEDOUT, "nothing yet");

    publish(dir, "a.h5", 10000);
    publish(dir, ".b.h5.tmp", 10);
    char tmp[4096], fin[4096];
    snprintf(tmp, sizeof tmp, "%s/.b.h5.tmp", dir);
    snprintf(fin, sizeof fin, "%s/b.h5", dir);
    CHECK(rename(tmp, fin) == 0, "rename");
    publish(dir, "notes.txt", 5);
    /* Being written: not published until closed. */
    snprintf(tmp, sizeof tmp, "%s/c.h5", dir);
    int open_fd = open(tmp, O_WRONLY | O_CREAT, 0644);
    CHECK(open_fd >= 0 && write(open_fd, "yy", 2) == 2, "open c.h5");

    CHECK(surge_watch_next(w, 5000, path, sizeof path, &cursor, &size) == 0, "a.h5 published");
    CHECK(strcmp(path + strlen(dir), "/a.h5") == 0 && size == 10000, "a.h5 first, whole: %s %llu", path, (unsigned long long)size);
    first = cursor;
    CHECK(surge_watch_next(w, 5000, path, sizeof path, &cursor, &size) == 0, "b.h5 published");
    CHECK(strcmp(path + strlen(dir), "/b.h5") == 0 && cursor > first, "then b.h5: %s", path);
    CHECK(surge_watch_next(w, 300, path, sizeof path, &cursor, &size) == -ETIMEDOUT, "c.h5 is still open");
    CHECK(close(open_fd) == 0, "close c.h5");
    CHECK(surge_watch_next(w, 5000, path, sizeof path, &cursor, &size) == 0, "c.h5 once closed");
    CHECK(strcmp(path + strlen(dir), "/c.h5") == 0 && size == 2, "c.h5 whole: %s", path);
    surge_watch_close(w);

    /* Resumed after a.h5: b.h5 next. A path that does not fit is refused and kept: the next
     * call, with room for it, hands that same publication, then the next (notes.txt). */
    CHECK(surge_watch_open(dir, NULL, first, &w) == 0, "reopen");
    cursor = 0;
    CHECK(surge_watch_next(w, 5000, small, sizeof small, &cursor, &size) == -ERANGE, "a short buffer");
    CHECK(cursor == 0, "no cursor for a publication not handed out");
    CHECK(surge_watch_next(w, 5000, small, sizeof small, &cursor, &size) == -ERANGE, "still too short");
    CHECK(surge_watch_next(w, 5000, path, sizeof path, &cursor, &size) == 0, "b.h5 with room for it");
    CHECK(strcmp(path + strlen(dir), "/b.h5") == 0 && cursor > first, "b.h5 again, not lost: %s", path);
    CHECK(surge_watch_next(w, 5000, path, sizeof path, &cursor, &size) == 0, "then notes.txt");
    CHECK(strcmp(path + strlen(dir), "/notes.txt") == 0, "notes.txt after b.h5: %s", path);
    surge_watch_close(w);
    CHECK(surge_watch_open("/no/such/mount/dir", NULL, 0, &w) < 0, "a path outside any instance");

    /* A group: each of the three .h5 files once, then nothing. A path that does not fit
     * takes nothing from the group: with no room for any name, no claim is made; with room for
     * "DIR/x" but not "DIR/a.h5", a.h5 is claimed and kept for this process, and the next
     * claim hands it at once (no wait, same token). */
    uint64_t token = 0, kept_token = 0;
    int handed = 0;
    surge_queue_counts counts;
    CHECK(surge_queue_claim(dir, "vis", "*.h5", 30.0, 0, small, sizeof small, &token) == -ERANGE, "no room for any name");
    CHECK(surge_queue_status(dir, "vis", &counts) == -ENOENT, "nothing asked of the instance: no group yet");
    size_t tight_size = strlen(dir) + 4; /* "DIR/a.h" does not fit, let alone "DIR/a.h5" */
    char *tight = malloc(tight_size);
    CHECK(tight != NULL, "malloc");
    CHECK(surge_queue_claim(dir, "vis", "*.h5", 30.0, 5000, tight, tight_size, &kept_token) == -ERANGE, "a short buffer");
    CHECK(surge_queue_claim(dir, "vis", "*.h5", 30.0, 5000, tight, tight_size, &kept_token) == -ERANGE, "still too short");
    free(tight);
    CHECK(surge_queue_status(dir, "vis", &counts) == 0 && counts.claimed == 1 && counts.backlog == 2,
          "one claim kept, not one per call: claimed %llu, backlog %llu", (unsigned long long)counts.claimed,
          (unsigned long long)counts.backlog);
    CHECK(surge_queue_claim(dir, "vis", "*.h5", 30.0, 0, path, sizeof path, &kept_token) == 0, "claimable again at once");
    CHECK(strcmp(path + strlen(dir), "/a.h5") == 0 && kept_token != 0, "the same file, a.h5: %s", path);
    CHECK(surge_queue_done(path, "vis", kept_token) == 0, "done %s", path);
    handed++;
    while (surge_queue_claim(dir, "vis", "*.h5", 30.0, 300, path, sizeof path, &token) == 0) {
        CHECK(token != 0 && token != kept_token, "a token");
        CHECK(surge_queue_done(path, NULL, token) == 0, "done %s", path);
        CHECK(surge_queue_done(path, "vis", token) == -ENOENT, "done once");
        handed++;
    }
    CHECK(handed == 3, "three files handed out, not %d", handed);
    CHECK(surge_queue_status(dir, "vis", &counts) == 0, "status");
    CHECK(counts.produced == 3 && counts.done == 3 && counts.backlog == 0 && counts.claimed == 0,
          "counts %llu %llu %llu %llu", (unsigned long long)counts.produced, (unsigned long long)counts.done,
          (unsigned long long)counts.backlog, (unsigned long long)counts.claimed);
    CHECK(counts.consumption_per_s > 0, "a consumption rate");
    CHECK(surge_queue_status(dir, "nobody", &counts) == -ENOENT, "no such group");
    CHECK(surge_queue_claim(dir, "vis", "other*", 30.0, 0, path, sizeof path, &token) == -EINVAL, "another pattern");
    printf("all workflow checks passed\n");
    return 0;
}
