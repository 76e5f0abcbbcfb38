/* The bench's NATS row: a request/reply round trip through Debian's nats-server.
 *
 *   nats-echo-bench NATS_SERVER BYTES REQUESTS WARMUP
 *
 * Starts nats-server on a free 127.0.0.1 port (nats-server has no Unix-domain sockets), a
 * responder process that publishes each request's payload back to its reply subject, and then,
 * as the client, sends REQUESTS + WARMUP requests of BYTES bytes one at a time
 * (natsConnection_Request, SendAsap on both connections). Prints "p50_us p99_us serial_rate".
 * Stops what it started, by pid. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <nats/nats.h>

#include "peer-common.h"

static void respond(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
    (void)sub;
    (void)closure;
    const char *reply = natsMsg_GetReply(msg);
    if (reply != NULL) natsConnection_Publish(nc, reply, natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
    natsMsg_Destroy(msg);
}

static natsConnection *connect_to(const char *url, int attempts) {
    natsOptions *options = NULL;
    natsConnection *nc = NULL;
    if (natsOptions_Create(&options) != NATS_OK) return NULL;
    natsOptions_SetURL(options, url);
    natsOptions_SetSendAsap(options, true);
    for (int i = 0; i < attempts; i++) {
        if (natsConnection_Connect(&nc, options) == NATS_OK) break;
        nc = NULL;
        usleep(20000);
    }
    natsOptions_Destroy(options);
    return nc;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = 0};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (fd < 0 || bind(fd, (struct sockaddr *)&address, sizeof address) != 0
        || getsockname(fd, (struct sockaddr *)&address, &length) != 0) {
        return -1;
    }
    close(fd);
    return ntohs(address.sin_port);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: nats-echo-bench NATS_SERVER BYTES REQUESTS WARMUP\n");
        return 2;
    }
    size_t bytes = strtoul(argv[2], NULL, 10);
    size_t requests = strtoul(argv[3], NULL, 10), warmup = strtoul(argv[4], NULL, 10);
    int port = free_port();
    if (port <= 0 || requests == 0) return 2;
    char port_text[16], url[64];
    snprintf(port_text, sizeof port_text, "%d", port);
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", port);

    char *server_argv[] = {argv[1], "-a", "127.0.0.1", "-p", port_text, NULL};
    pid_t server = peer_spawn(server_argv, -1);
    int ready[2];
    if (server < 0 || pipe(ready) != 0) return 1;

    pid_t responder = peer_fork();
    if (responder == 0) {
        natsConnection *nc = connect_to(url, 250);
        natsSubscription *sub = NULL;
        if (nc == NULL || natsConnection_Subscribe(&sub, nc, "bench.echo", respond, NULL) != NATS_OK
            || natsConnection_Flush(nc) != NATS_OK) {
            _exit(1);
        }
        (void)!write(ready[1], "r", 1);
        for (;;) pause();
    }
    close(ready[1]);
    char byte;
    int status = 1;
    natsConnection *nc = NULL;
    uint64_t *samples = NULL;
    if (read(ready[0], &byte, 1) != 1) {
        fprintf(stderr, "nats-echo-bench: the responder could not subscribe\n");
        goto done;
    }
    nc = connect_to(url, 250);
    if (nc == NULL) {
        fprintf(stderr, "nats-echo-bench: cannot connect to %s\n", url);
        goto done;
    }
    char *payload = malloc(bytes);
    samples = calloc(requests, sizeof samples[0]);
    memset(payload, 'x', bytes);
    for (size_t i = 0; i < warmup + requests; i++) {
        natsMsg *reply = NULL;
        uint64_t start = peer_now_ns();
        natsStatus s = natsConnection_Request(&reply, nc, "bench.echo", payload, (int)bytes, 5000);
        uint64_t took = peer_now_ns() - start;
        if (s != NATS_OK || natsMsg_GetDataLength(reply) != (int)bytes) {
            fprintf(stderr, "nats-echo-bench: request %zu failed: %s\n", i, natsStatus_GetText(s));
            natsMsg_Destroy(reply);
            goto done;
        }
        natsMsg_Destroy(reply);
        if (i >= warmup) samples[i - warmup] = took;
    }
    peer_print_summary(samples, requests);
    status = 0;
    free(payload);
done:
    if (nc != NULL) natsConnection_Destroy(nc);
    peer_stop(responder);
    peer_stop(server);
    free(samples);
    return status;
}
