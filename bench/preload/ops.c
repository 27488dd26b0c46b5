/* The calls an unmodified program makes, timed per phase, one process: what bench/preload.sh
 * runs on each file system (through the kernel, or under the interception library).
 *
 *   ops DIR FILES SIZE STREAM_MIB
 *
 * In DIR: FILES files of SIZE bytes created (open O_CREAT|O_EXCL, write, close), stat'ed,
 * read (open, read, close) and unlinked, one after another (the latency a serial tool sees);
 * then one file of STREAM_MIB MiB written in 1 MiB writes and closed, and read back. Prints
 * one line per phase: "name value unit". Exits 1 if a read gives other bytes than written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what, const char *path) {
    fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno));
    exit(2);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s DIR FILES SIZE STREAM_MIB\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    long files = atol(argv[2]), size = atol(argv[3]), stream_mib = atol(argv[4]);
    char path[4096];
    char *data = malloc(size > (1 << 20) ? size : (1 << 20)), *back = malloc(size > (1 << 20) ? size : (1 << 20));
    for (long i = 0; i < (size > (1 << 20) ? size : (1 << 20)); i++) data[i] = (char)(i * 7 + 3);

    double t = now();
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f.%ld", dir, i);
        int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) die("create", path);
        if (size > 0 && write(fd, data, size) != size) die("write", path);
        if (close(fd) != 0) die("close", path);
    }
    printf("create %.0f ops/s\n", files / (now() - t));

    t = now();
    for (long i = 0; i < files; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/f.%ld", dir, i);
        if (stat(path, &st) != 0) die("stat", path);
        if (st.st_size != size) { fprintf(stderr, "stat %s: size %ld, not %ld\n", path, (long)st.st_size, size); return 1; }
    }
    printf("stat %.0f ops/s\n", files / (now() - t));

    t = now();
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f.%ld", dir, i);
        int fd = open(path, O_RDONLY);
        if (fd < 0) die("open", path);
        if (size > 0 && (read(fd, back, size) != size || memcmp(back, data, size) != 0)) { fprintf(stderr, "read %s: wrong bytes\n", path); return 1; }
        close(fd);
    }
    printf("read %.0f ops/s\n", files / (now() - t));

    t = now();
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/f.%ld", dir, i);
        if (unlink(path) != 0) die("unlink", path);
    }
    printf("unlink %.0f ops/s\n", files / (now() - t));

    snprintf(path, sizeof path, "%s/stream", dir);
    t = now();
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) die("create", path);
    for (long i = 0; i < stream_mib; i++)
        if (write(fd, data, 1 << 20) != 1 << 20) die("write", path);
    if (close(fd) != 0) die("close", path);
    printf("write %.0f MiB/s\n", stream_mib / (now() - t));
    t = now();
    fd = open(path, O_RDONLY);
    if (fd < 0) die("open", path);
    for (long i = 0; i < stream_mib; i++)
        if (read(fd, back, 1 << 20) != 1 << 20 || memcmp(back, data, 1 << 20) != 0) { fprintf(stderr, "read %s: wrong bytes\n", path); return 1; }
    close(fd);
    printf("read-stream %.0f MiB/s\n", stream_mib / (now() - t));
    unlink(path);
    return 0;
}
