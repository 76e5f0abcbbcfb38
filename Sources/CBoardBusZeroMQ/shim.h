#ifndef BOARDBUS_CZEROMQ_SHIM_H
#define BOARDBUS_CZEROMQ_SHIM_H
/* libzmq from Debian's libzmq3-dev. Only BusZeroMQ imports it; the Linux calls it makes beside
   libzmq's are CBoardBusLinux's. */
#include <zmq.h>
#endif
