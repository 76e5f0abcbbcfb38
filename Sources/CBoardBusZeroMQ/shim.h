#ifndef BOARDBUS_CZEROMQ_SHIM_H
#define BOARDBUS_CZEROMQ_SHIM_H
#include <zmq.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/prctl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Names the calling thread (at most 15 bytes are kept); prctl is variadic, which Swift cannot call. */
static inline int boardbus_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

/* 1 on the process's main thread (its thread id is the process id), else 0. */
static inline int boardbus_is_main_thread(void) {
    return syscall(SYS_gettid) == getpid();
}

/* Bytes the C heap holds free (glibc's mallinfo2, which Swift's Glibc module does not export). */
static inline size_t boardbus_heap_free_bytes(void) {
    return mallinfo2().fordblks;
}

/* Gives free heap memory back to the system (glibc's malloc_trim). */
static inline int boardbus_trim_heap(void) {
    return malloc_trim(0);
}
/* The process at the other end of a Unix-domain socket, as the kernel recorded it when it
   connected (SO_PEERCRED), or 0 for another kind of socket. Linux's struct ucred, declared here
   since <sys/socket.h> has it only under _GNU_SOURCE. */
struct boardbus_peer_credentials { int pid; unsigned int uid; unsigned int gid; };
static inline int boardbus_peer_process_id(int descriptor) {
    struct boardbus_peer_credentials credentials = {0, 0, 0};
    socklen_t length = sizeof credentials;
    if (descriptor < 0 || getsockopt(descriptor, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return 0;
    return credentials.pid;
}
#endif
