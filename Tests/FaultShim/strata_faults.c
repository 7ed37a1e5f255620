// strata_faults: an LD_PRELOAD shim that fails chosen write and sync calls, for the
// reliability suite's I/O fault runs (Sources/StrataReliability/FaultRuns.swift).
//
// Built by `make faults` into .build-faults/libstrata_faults.so. Configured by environment
// variables, read once:
//
//   STRATA_FAULT_OPS     comma list of write, pwrite, writev, pwritev, fsync, fdatasync,
//                        msync, or `all` (default: none; nothing is counted or failed).
//                        pwrite covers pwrite64; pwritev covers pwritev64, pwritev2 and
//                        pwritev64v2.
//   STRATA_FAULT_PATH    only file descriptors whose /proc/self/fd target starts with this
//                        prefix are counted (default: every descriptor). msync, which has
//                        no descriptor, is always counted when listed.
//   STRATA_FAULT_AT      N: the Nth counted operation fails (1-based; default 0: never).
//   STRATA_FAULT_MODE    once (only the Nth fails), forever (the Nth and every later one),
//                        or short (the Nth writes half its bytes and returns that count;
//                        a sync call fails as with once). Default once.
//   STRATA_FAULT_ERRNO   EIO, ENOSPC or a number (default EIO).
//   STRATA_FAULT_REPORT  a file that gets one line per counted operation, written as it
//                        happens (a killed or _exit()ing process still leaves its report):
//                          op <n> <kind> <bytes> ok|fault|short <descriptor target>
//                        and `exit <counted> <injected>` from a destructor when the process
//                        exits normally.
//
// A failed operation is not performed: it returns -1 with errno set and changes nothing.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum kind { K_WRITE, K_PWRITE, K_WRITEV, K_PWRITEV, K_FSYNC, K_FDATASYNC, K_MSYNC, K_COUNT };
static const char *const kind_names[K_COUNT] = {
    "write", "pwrite", "writev", "pwritev", "fsync", "fdatasync", "msync",
};

enum mode { MODE_ONCE, MODE_FOREVER, MODE_SHORT };

static struct {
    int enabled[K_COUNT];
    char path[4096];
    size_t path_length;
    long at;
    enum mode mode;
    int error;
    int report;  // a descriptor, or -1
} config = { .report = -1 };

static long counted;   // operations counted so far (atomic)
static long injected;  // faults injected so far (atomic)
static pthread_once_t once = PTHREAD_ONCE_INIT;

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwritev64v2)(int, const struct iovec *, int, off_t, int);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);

static void resolve(void) {
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_pwritev = dlsym(RTLD_NEXT, "pwritev");
    real_pwritev64 = dlsym(RTLD_NEXT, "pwritev64");
    real_pwritev2 = dlsym(RTLD_NEXT, "pwritev2");
    real_pwritev64v2 = dlsym(RTLD_NEXT, "pwritev64v2");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_msync = dlsym(RTLD_NEXT, "msync");
}

static void configure(void) {
    resolve();
    const char *ops = getenv("STRATA_FAULT_OPS");
    if (ops) {
        char list[512];
        snprintf(list, sizeof list, "%s", ops);
        char *saved = NULL;
        for (char *name = strtok_r(list, ",", &saved); name; name = strtok_r(NULL, ",", &saved)) {
            for (int k = 0; k < K_COUNT; k++) {
                if (strcmp(name, "all") == 0 || strcmp(name, kind_names[k]) == 0) config.enabled[k] = 1;
            }
            if (strcmp(name, "pwrite64") == 0) config.enabled[K_PWRITE] = 1;
            if (strcmp(name, "pwritev2") == 0) config.enabled[K_PWRITEV] = 1;
        }
    }
    const char *path = getenv("STRATA_FAULT_PATH");
    if (path) {
        snprintf(config.path, sizeof config.path, "%s", path);
        config.path_length = strlen(config.path);
    }
    const char *at = getenv("STRATA_FAULT_AT");
    config.at = at ? strtol(at, NULL, 10) : 0;
    const char *mode = getenv("STRATA_FAULT_MODE");
    config.mode = !mode ? MODE_ONCE
        : strcmp(mode, "forever") == 0 ? MODE_FOREVER
        : strcmp(mode, "short") == 0 ? MODE_SHORT
        : MODE_ONCE;
    const char *error = getenv("STRATA_FAULT_ERRNO");
    config.error = !error ? EIO
        : strcmp(error, "EIO") == 0 ? EIO
        : strcmp(error, "ENOSPC") == 0 ? ENOSPC
        : atoi(error) > 0 ? atoi(error)
        : EIO;
    const char *report = getenv("STRATA_FAULT_REPORT");
    if (report && *report) {
        config.report = open(report, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
}

static void setup(void) {
    int saved = errno;
    pthread_once(&once, configure);
    errno = saved;
}

// Where a descriptor points, into `target` (empty when unknown).
static void describe(int fd, char *target, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t length = readlink(link, target, size - 1);
    target[length > 0 ? length : 0] = '\0';
}

static void report_line(const char *format, ...) {
    if (config.report < 0 || !real_write) return;
    char line[4300];
    va_list arguments;
    va_start(arguments, format);
    int length = vsnprintf(line, sizeof line, format, arguments);
    va_end(arguments);
    if (length <= 0) return;
    if ((size_t)length >= sizeof line) length = sizeof line - 1;
    // One write(2) per line on an O_APPEND descriptor: lines of threads never interleave.
    ssize_t ignored = real_write(config.report, line, (size_t)length);
    (void)ignored;
}

enum verdict { PASS, FAIL, SHORTEN };

// Counts the operation when it is configured and on a matching descriptor, and says
// what to do with it. `fd` < 0: no descriptor (msync).
static enum verdict judge(enum kind kind, int fd, size_t bytes) {
    int saved = errno;
    setup();
    if (!config.enabled[kind]) return PASS;
    char target[4096] = "";
    if (fd >= 0) {
        describe(fd, target, sizeof target);
        if (config.path_length && strncmp(target, config.path, config.path_length) != 0) {
            errno = saved;
            return PASS;
        }
    }
    long n = __atomic_add_fetch(&counted, 1, __ATOMIC_SEQ_CST);
    enum verdict verdict = PASS;
    if (config.at > 0 && (n == config.at || (n > config.at && config.mode == MODE_FOREVER))) {
        int can_shorten = kind != K_FSYNC && kind != K_FDATASYNC && kind != K_MSYNC && bytes > 1;
        verdict = config.mode == MODE_SHORT && can_shorten ? SHORTEN : FAIL;
        __atomic_add_fetch(&injected, 1, __ATOMIC_SEQ_CST);
    }
    report_line("op %ld %s %zu %s %s\n", n, kind_names[kind], bytes,
                verdict == PASS ? "ok" : verdict == FAIL ? "fault" : "short", target);
    errno = saved;
    return verdict;
}

static size_t total_bytes(const struct iovec *iov, int count) {
    size_t total = 0;
    for (int i = 0; i < count; i++) total += iov[i].iov_len;
    return total;
}

// The first `limit` bytes of `iov`, in `out` (at most `count` entries); returns the count.
static int truncate_iov(const struct iovec *iov, int count, size_t limit, struct iovec *out) {
    int used = 0;
    for (int i = 0; i < count && limit > 0; i++) {
        out[used] = iov[i];
        if (out[used].iov_len > limit) out[used].iov_len = limit;
        limit -= out[used].iov_len;
        used++;
    }
    return used;
}

#define FAIL_WITH(value) do { errno = config.error; return (value); } while (0)

ssize_t write(int fd, const void *buffer, size_t count) {
    switch (judge(K_WRITE, fd, count)) {
    case FAIL: FAIL_WITH(-1);
    case SHORTEN: return real_write(fd, buffer, count / 2);
    default: return real_write(fd, buffer, count);
    }
}

static ssize_t do_pwrite(ssize_t (*real)(int, const void *, size_t, off_t), int fd, const void *buffer, size_t count, off_t offset) {
    switch (judge(K_PWRITE, fd, count)) {
    case FAIL: FAIL_WITH(-1);
    case SHORTEN: return real(fd, buffer, count / 2, offset);
    default: return real(fd, buffer, count, offset);
    }
}

ssize_t pwrite(int fd, const void *buffer, size_t count, off_t offset) {
    setup();
    return do_pwrite(real_pwrite, fd, buffer, count, offset);
}

ssize_t pwrite64(int fd, const void *buffer, size_t count, off_t offset) {
    setup();
    return do_pwrite(real_pwrite64, fd, buffer, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    size_t bytes = total_bytes(iov, count);
    switch (judge(K_WRITEV, fd, bytes)) {
    case FAIL: FAIL_WITH(-1);
    case SHORTEN: {
        struct iovec half[count > 0 ? count : 1];
        return real_writev(fd, half, truncate_iov(iov, count, bytes / 2, half));
    }
    default: return real_writev(fd, iov, count);
    }
}

static ssize_t do_pwritev(ssize_t (*real)(int, const struct iovec *, int, off_t), int fd, const struct iovec *iov, int count, off_t offset) {
    size_t bytes = total_bytes(iov, count);
    switch (judge(K_PWRITEV, fd, bytes)) {
    case FAIL: FAIL_WITH(-1);
    case SHORTEN: {
        struct iovec half[count > 0 ? count : 1];
        return real(fd, half, truncate_iov(iov, count, bytes / 2, half), offset);
    }
    default: return real(fd, iov, count, offset);
    }
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    setup();
    return do_pwritev(real_pwritev, fd, iov, count, offset);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t offset) {
    setup();
    return do_pwritev(real_pwritev64, fd, iov, count, offset);
}

static ssize_t do_pwritev2(ssize_t (*real)(int, const struct iovec *, int, off_t, int), int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    size_t bytes = total_bytes(iov, count);
    switch (judge(K_PWRITEV, fd, bytes)) {
    case FAIL: FAIL_WITH(-1);
    case SHORTEN: {
        struct iovec half[count > 0 ? count : 1];
        return real(fd, half, truncate_iov(iov, count, bytes / 2, half), offset, flags);
    }
    default: return real(fd, iov, count, offset, flags);
    }
}

ssize_t pwritev2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    setup();
    return do_pwritev2(real_pwritev2, fd, iov, count, offset, flags);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    setup();
    return do_pwritev2(real_pwritev64v2, fd, iov, count, offset, flags);
}

int fsync(int fd) {
    if (judge(K_FSYNC, fd, 0) != PASS) FAIL_WITH(-1);
    return real_fsync(fd);
}

int fdatasync(int fd) {
    if (judge(K_FDATASYNC, fd, 0) != PASS) FAIL_WITH(-1);
    return real_fdatasync(fd);
}

int msync(void *address, size_t length, int flags) {
    if (judge(K_MSYNC, -1, length) != PASS) FAIL_WITH(-1);
    return real_msync(address, length, flags);
}

__attribute__((destructor)) static void finish(void) {
    if (config.report < 0) return;
    report_line("exit %ld %ld\n", __atomic_load_n(&counted, __ATOMIC_SEQ_CST),
                __atomic_load_n(&injected, __ATOMIC_SEQ_CST));
}
