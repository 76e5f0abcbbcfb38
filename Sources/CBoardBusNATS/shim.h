#ifndef BOARDBUS_CNATS_SHIM_H
#define BOARDBUS_CNATS_SHIM_H
/* libnats from Debian's libnats-dev (nats.h in /usr/include/nats). Only BusNATS imports it. */
#include <nats/nats.h>
#include <sys/eventfd.h>
#endif
