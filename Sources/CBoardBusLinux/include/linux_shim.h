#ifndef BOARDBUS_LINUX_SHIM_H
#define BOARDBUS_LINUX_SHIM_H
/* The Linux calls BoardBus makes that Swift's Glibc module does not export or cannot call
   (variadic prctl, mallinfo2, struct ucred), and the headers of eventfd, timerfd, epoll and
   signalfd. No library but libc. */
#include <stddef.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <signal.h>

/* Names the calling thread (at most 15 bytes are kept). */
int boardbus_set_thread_name(const char *name);

/* 1 on the process's main thread (its thread id is the process id), else 0. */
int boardbus_is_main_thread(void);

/* Bytes the C heap holds free (glibc's mallinfo2). */
size_t boardbus_heap_free_bytes(void);

/* Gives free heap memory back to the system (glibc's malloc_trim). */
int boardbus_trim_heap(void);

/* The process at the other end of a Unix-domain socket, as the kernel recorded it when it
   connected (SO_PEERCRED), or 0 for another kind of socket. */
int boardbus_peer_process_id(int descriptor);
#endif
