// The benchmark's baseline peer: a DEALER that sends every multipart message straight back
// (routing id frame included), so the baseline proxy returns it to the client that sent it.
// usage: zmq-baseline-echo BACK_ENDPOINT
#include <stdio.h>
#include <zmq.h>

#include "parent_watch.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s BACK_ENDPOINT\n", argv[0]);
        return 2;
    }
    void *context = zmq_ctx_new();
    void *socket = zmq_socket(context, ZMQ_DEALER);
    int zero = 0, hwm = 10000;
    zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(socket, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(socket, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_connect(socket, argv[1]) != 0) {
        fprintf(stderr, "connect failed: %s\n", zmq_strerror(zmq_errno()));
        return 1;
    }
    exit_with_parent();
    printf("READY\n");
    fflush(stdout);
    zmq_msg_t message;
    zmq_msg_init(&message);
    for (;;) {
        if (zmq_msg_recv(&message, socket, 0) < 0) break;
        int more = zmq_msg_more(&message);
        if (zmq_msg_send(&message, socket, more ? ZMQ_SNDMORE : 0) < 0) break;
    }
    zmq_msg_close(&message);
    return 0;
}
