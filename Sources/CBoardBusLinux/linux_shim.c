#define _GNU_SOURCE
#include "linux_shim.h"
#include <malloc.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int boardbus_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

int boardbus_is_main_thread(void) {
    return syscall(SYS_gettid) == getpid();
}

size_t boardbus_heap_free_bytes(void) {
    return mallinfo2().fordblks;
}

int boardbus_trim_heap(void) {
    return malloc_trim(0);
}

int boardbus_peer_process_id(int descriptor) {
    struct ucred credentials = {0, 0, 0};
    socklen_t length = sizeof credentials;
    if (descriptor < 0 || getsockopt(descriptor, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return 0;
    return credentials.pid;
}
