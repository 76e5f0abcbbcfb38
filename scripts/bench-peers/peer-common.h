/* Shared by the bench's NATS and D-Bus harnesses: timing, the summary line, child processes. */
#ifndef BENCH_PEER_COMMON_H
#define BENCH_PEER_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t peer_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int peer_compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Prints "p50_us p99_us serial_rate_per_s" of the round trips, one line on stdout. */
static inline void peer_print_summary(uint64_t *samples, size_t count) {
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) total += samples[i];
    qsort(samples, count, sizeof samples[0], peer_compare_u64);
    double p50 = samples[(count - 1) * 50 / 100] / 1000.0;
    double p99 = samples[(count - 1) * 99 / 100] / 1000.0;
    printf("%.1f %.1f %.0f\n", p50, p99, count / (total / 1e9));
    fflush(stdout);
}

/* A load's rate: what `done` (a counter the load's callbacks add to) gained over `seconds`,
 * after `warmup_ms` not counted. Prints "rate_per_s", one line on stdout. */
static inline void peer_measure_load(volatile uint64_t *const *done, int count, int warmup_ms, double seconds) {
    usleep((useconds_t)warmup_ms * 1000);
    uint64_t before = 0, after = 0;
    for (int i = 0; i < count; i++) before += __atomic_load_n(done[i], __ATOMIC_RELAXED);
    uint64_t start = peer_now_ns();
    usleep((useconds_t)(seconds * 1e6));
    for (int i = 0; i < count; i++) after += __atomic_load_n(done[i], __ATOMIC_RELAXED);
    printf("%.0f\n", (after - before) / ((peer_now_ns() - start) / 1e9));
    fflush(stdout);
}

/* In a child: execs `argv` with LISTEN_FDS=1 (fd 3 = `listen_fd`) when `listen_fd` >= 0, its
 * output to /dev/null (unless BENCH_PEER_VERBOSE is set). */
static inline void __attribute__((noreturn)) peer_exec_activated(char *const argv[], int listen_fd) {
    if (listen_fd >= 0) {
        if (listen_fd != 3) {
            dup2(listen_fd, 3);
            close(listen_fd);
        }
        fcntl(3, F_SETFD, 0); /* kept across exec even when it was 3 already, with CLOEXEC */
        char value[32];
        snprintf(value, sizeof value, "%d", (int)getpid());
        setenv("LISTEN_PID", value, 1);
        setenv("LISTEN_FDS", "1", 1);
    }
    int devnull = getenv("BENCH_PEER_VERBOSE") ? -1 : open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
        dup2(devnull, 1);
        dup2(devnull, 2);
    }
    execv(argv[0], argv);
    _exit(127);
}

/* fork(), the child set to get SIGTERM when this process dies. */
static inline pid_t peer_fork(void) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    return 0;
}

/* Starts `argv` (see peer_exec_activated) in a peer_fork() child. Returns its pid, or -1. */
static inline pid_t peer_spawn(char *const argv[], int listen_fd) {
    pid_t pid = peer_fork();
    if (pid != 0) return pid;
    peer_exec_activated(argv, listen_fd);
}

/* Stops a child this process started: SIGTERM, then SIGKILL after two seconds. */
static inline void peer_stop(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

#endif
