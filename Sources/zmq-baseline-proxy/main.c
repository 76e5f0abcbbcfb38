// The benchmark's baseline broker: what ZeroMQ itself costs for one broker hop.
// A ROUTER front and a DEALER back joined by zmq_proxy, nothing else.
// usage: zmq-baseline-proxy FRONT_ENDPOINT BACK_ENDPOINT [CURVE_SECRET_KEY]
// With a secret key (Z85), the front is a CURVE server (as a BoardBus tcp endpoint is).
#include <stdio.h>
#include <zmq.h>

#include "parent_watch.h"

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s FRONT_ENDPOINT BACK_ENDPOINT [CURVE_SECRET_KEY]\n", argv[0]);
        return 2;
    }
    void *context = zmq_ctx_new();
    void *front = zmq_socket(context, ZMQ_ROUTER);
    void *back = zmq_socket(context, ZMQ_DEALER);
    int zero = 0, hwm = 10000;
    zmq_setsockopt(front, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(back, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(front, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(front, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(back, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(back, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (argc == 4) {
        int on = 1;
        zmq_setsockopt(front, ZMQ_CURVE_SERVER, &on, sizeof on);
        if (zmq_setsockopt(front, ZMQ_CURVE_SECRETKEY, argv[3], 40) != 0) {
            fprintf(stderr, "bad CURVE secret key: %s\n", zmq_strerror(zmq_errno()));
            return 1;
        }
    }
    if (zmq_bind(front, argv[1]) != 0 || zmq_bind(back, argv[2]) != 0) {
        fprintf(stderr, "bind failed: %s\n", zmq_strerror(zmq_errno()));
        return 1;
    }
    exit_with_parent();
    printf("READY\n");
    fflush(stdout);
    zmq_proxy(front, back, NULL);  // returns when the process is terminated
    return 0;
}
