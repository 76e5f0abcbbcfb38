// The benchmark's baseline client, for counting (scripts/bench --counts): REQUESTS round trips,
// one at a time, of HEADER_BYTES and PAYLOAD_BYTES in one frame through the baseline proxy and
// echo, as BoardBus's client sends a message; with FRAMES 2, in two frames (as version 3 of the
// protocol sent a header and a payload). Nothing but libzmq.
// usage: zmq-baseline-client FRONT_ENDPOINT REQUESTS HEADER_BYTES PAYLOAD_BYTES [FRAMES]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s FRONT_ENDPOINT REQUESTS HEADER_BYTES PAYLOAD_BYTES [FRAMES]\n", argv[0]);
        return 2;
    }
    long requests = strtol(argv[2], NULL, 10);
    size_t header_bytes = (size_t)strtoul(argv[3], NULL, 10), payload_bytes = (size_t)strtoul(argv[4], NULL, 10);
    int one_frame = argc == 5 || strcmp(argv[5], "2") != 0;
    char *header = calloc(header_bytes + payload_bytes + 1, 1), *payload = header + header_bytes;
    memset(payload, 'x', payload_bytes);
    void *context = zmq_ctx_new();
    void *socket = zmq_socket(context, ZMQ_DEALER);
    // Every wait has a limit: a minute, for peers slowed down by valgrind.
    int zero = 0, limit = 60000;
    zmq_setsockopt(socket, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(socket, ZMQ_RCVTIMEO, &limit, sizeof limit);
    zmq_setsockopt(socket, ZMQ_SNDTIMEO, &limit, sizeof limit);
    if (zmq_connect(socket, argv[1]) != 0) {
        fprintf(stderr, "connect failed: %s\n", zmq_strerror(zmq_errno()));
        return 1;
    }
    zmq_msg_t reply;
    zmq_msg_init(&reply);
    for (long index = 0; index < requests; index++) {
        int sent = one_frame ? zmq_send(socket, header, header_bytes + payload_bytes, 0)
                             : (zmq_send(socket, header, header_bytes, ZMQ_SNDMORE) < 0 ? -1 : zmq_send(socket, payload, payload_bytes, 0));
        if (sent < 0) {
            fprintf(stderr, "send failed: %s\n", zmq_strerror(zmq_errno()));
            return 1;
        }
        do {
            if (zmq_msg_recv(&reply, socket, 0) < 0) {
                fprintf(stderr, "no reply to request %ld: %s\n", index, zmq_strerror(zmq_errno()));
                return 1;
            }
        } while (zmq_msg_more(&reply));
    }
    zmq_msg_close(&reply);
    zmq_close(socket);
    zmq_ctx_term(context);
    free(header);
    printf("DONE %ld\n", requests);
    return 0;
}
