#ifndef BOARDBUS_CZEROMQ_SHIM_H
#define BOARDBUS_CZEROMQ_SHIM_H
#include <zmq.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#endif
