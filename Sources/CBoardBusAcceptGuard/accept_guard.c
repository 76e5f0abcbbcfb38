/* The accept guard: the process's accept() and accept4(), which libzmq's listeners (and the
   metrics port's) call, defined here so that they keep the process away from its descriptor limit.

   libzmq 4.3's ipc listener asserts, aborting the process, when accept() fails with EMFILE, and
   its tcp listener retries at once, spinning, as long as the connection waits. No socket option
   bounds the connections a listener accepts. So the process bounds them itself, below libzmq:

   - a connection accepted on a descriptor numbered at or above the ceiling is closed at once.
     Descriptors are allocated lowest first, so that happens only when every descriptor below
     the ceiling is open: those above it stay free for the process's own work;
   - when accept() fails with EMFILE or ENFILE, one spare descriptor is closed, the waiting
     connection accepted into it and closed, and the spare opened again: the listener's queue
     moves on, nothing spins.

   Both report ECONNABORTED, which every listener treats as a connection that went away before it
   was accepted. The executable's definitions take the place of libc's for the shared libraries
   it loads (libzmq's calls go through the dynamic linker's global scope, which starts with the
   executable); the real ones are found with dlsym(RTLD_NEXT). */
#define _GNU_SOURCE
#include "accept_guard.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*accept4_function)(int, struct sockaddr *, socklen_t *, int);

static _Atomic int ceiling = 0;
static _Atomic int spare = -1;
static _Atomic long refused = 0;

void boardbus_accept_guard_start(int descriptor_ceiling) {
    int none = -1;
    int opened = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!atomic_compare_exchange_strong(&spare, &none, opened) && opened >= 0) close(opened);
    atomic_store(&ceiling, descriptor_ceiling);
}

long boardbus_accept_guard_refused(void) { return atomic_load(&refused); }

static accept4_function real_accept4(void) {
    static _Atomic(accept4_function) found = NULL;
    accept4_function function = atomic_load(&found);
    if (function == NULL) {
        function = (accept4_function)dlsym(RTLD_NEXT, "accept4");
        atomic_store(&found, function);
    }
    return function;
}

static int refuse(void) {
    atomic_fetch_add(&refused, 1);
    errno = ECONNABORTED;
    return -1;
}

int accept4(int listener, struct sockaddr *address, socklen_t *length, int flags) {
    accept4_function accept_for_real = real_accept4();
    if (accept_for_real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    int descriptor = accept_for_real(listener, address, length, flags);
    if (descriptor < 0) {
        if (errno != EMFILE && errno != ENFILE) return -1;
        int descriptor_spare = atomic_exchange(&spare, -1);
        if (descriptor_spare < 0) return refuse();
        close(descriptor_spare);
        int waiting = accept_for_real(listener, NULL, NULL, SOCK_CLOEXEC);
        if (waiting >= 0) close(waiting);
        atomic_store(&spare, open("/dev/null", O_RDONLY | O_CLOEXEC));
        return refuse();
    }
    int limit = atomic_load(&ceiling);
    if (limit > 0 && descriptor >= limit) {
        close(descriptor);
        return refuse();
    }
    return descriptor;
}

int accept(int listener, struct sockaddr *address, socklen_t *length) { return accept4(listener, address, length, 0); }
