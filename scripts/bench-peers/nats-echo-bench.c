/* The bench's NATS rows: a request/reply round trip through Debian's nats-server, and a load.
 *
 *   nats-echo-bench NATS_SERVER BYTES REQUESTS WARMUP
 *   nats-echo-bench NATS_SERVER BYTES load|load-asap CONNECTIONS WINDOW SECONDS
 *
 * Starts nats-server on a free 127.0.0.1 port (nats-server has no Unix-domain sockets), a
 * responder process that publishes each request's payload back to its reply subject, and then,
 * as the client, sends REQUESTS + WARMUP requests of BYTES bytes one at a time
 * (natsConnection_Request, SendAsap on both connections) and prints "p50_us p99_us serial_rate";
 * or, with `load`, keeps WINDOW requests in flight on each of CONNECTIONS connections (each
 * reply, to the connection's own inbox, sends the next request) and prints the replies per
 * second over SECONDS, after 0.3 s not counted: with libnats's default buffering on every
 * connection (`load`: its flusher thread writes, best at large windows) or SendAsap (`load-asap`:
 * every publish written at once, best at small ones). Stops what it started, by pid. */
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

/* One loaded connection: its inbox, its payload and the replies it got. */
typedef struct {
    char inbox[64];
    const char *payload;
    int bytes;
    volatile uint64_t done;
    volatile int stopping;
} load_t;

static void on_reply(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
    (void)sub;
    load_t *load = closure;
    natsMsg_Destroy(msg);
    __atomic_add_fetch(&load->done, 1, __ATOMIC_RELAXED);
    if (!load->stopping) natsConnection_PublishRequest(nc, "bench.echo", load->inbox, load->payload, load->bytes);
}

static natsConnection *connect_to(const char *url, int attempts, bool send_asap) {
    natsOptions *options = NULL;
    natsConnection *nc = NULL;
    if (natsOptions_Create(&options) != NATS_OK) return NULL;
    natsOptions_SetURL(options, url);
    natsOptions_SetSendAsap(options, send_asap);
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

/* The load: CONNECTIONS connections, each WINDOW requests in flight; prints the rate. */
static int run_load(const char *url, const char *payload, int bytes, int connections, int window, double seconds, bool asap) {
    natsConnection *ncs[64] = {0};
    natsSubscription *subs[64] = {0};
    load_t loads[64];
    volatile uint64_t *done[64];
    int status = 1;
    for (int c = 0; c < connections; c++) {
        load_t *load = &loads[c];
        memset(load, 0, sizeof *load);
        snprintf(load->inbox, sizeof load->inbox, "_INBOX.bench.%d.%d", (int)getpid(), c);
        load->payload = payload;
        load->bytes = bytes;
        done[c] = &load->done;
        ncs[c] = connect_to(url, 250, asap);
        if (ncs[c] == NULL || natsConnection_Subscribe(&subs[c], ncs[c], load->inbox, on_reply, load) != NATS_OK
            || natsConnection_Flush(ncs[c]) != NATS_OK) {
            fprintf(stderr, "nats-echo-bench: cannot connect to %s\n", url);
            goto stop;
        }
    }
    for (int c = 0; c < connections; c++) {
        for (int i = 0; i < window; i++) natsConnection_PublishRequest(ncs[c], "bench.echo", loads[c].inbox, payload, bytes);
        natsConnection_Flush(ncs[c]);
    }
    peer_measure_load(done, connections, 300, seconds);
    status = 0;
stop:
    for (int c = 0; c < connections; c++) loads[c].stopping = 1;
    for (int c = 0; c < connections; c++) {
        if (subs[c] != NULL) natsSubscription_Destroy(subs[c]);
        if (ncs[c] != NULL) natsConnection_Destroy(ncs[c]);
    }
    return status;
}

int main(int argc, char **argv) {
    int loaded = argc == 7 && strncmp(argv[3], "load", 4) == 0;
    bool asap = !loaded || strcmp(argv[3], "load-asap") == 0;
    if (argc != 5 && !loaded) {
        fprintf(stderr, "usage: nats-echo-bench NATS_SERVER BYTES REQUESTS WARMUP\n"
                        "       nats-echo-bench NATS_SERVER BYTES load|load-asap CONNECTIONS WINDOW SECONDS\n");
        return 2;
    }
    size_t bytes = strtoul(argv[2], NULL, 10);
    size_t requests = loaded ? 1 : strtoul(argv[3], NULL, 10), warmup = loaded ? 0 : strtoul(argv[4], NULL, 10);
    int connections = loaded ? atoi(argv[4]) : 0, window = loaded ? atoi(argv[5]) : 0;
    double seconds = loaded ? atof(argv[6]) : 0;
    int port = free_port();
    if (port <= 0 || requests == 0 || (loaded && (connections < 1 || connections > 64 || window < 1 || seconds <= 0))) return 2;
    char port_text[16], url[64];
    snprintf(port_text, sizeof port_text, "%d", port);
    snprintf(url, sizeof url, "nats://127.0.0.1:%d", port);

    char *server_argv[] = {argv[1], "-a", "127.0.0.1", "-p", port_text, NULL};
    pid_t server = peer_spawn(server_argv, -1);
    int ready[2];
    if (server < 0 || pipe(ready) != 0) return 1;

    pid_t responder = peer_fork();
    if (responder == 0) {
        natsConnection *nc = connect_to(url, 250, asap);
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
    char *payload = malloc(bytes);
    memset(payload, 'x', bytes);
    if (loaded) {
        status = run_load(url, payload, (int)bytes, connections, window, seconds, asap);
        free(payload);
        goto done;
    }
    nc = connect_to(url, 250, true);
    if (nc == NULL) {
        fprintf(stderr, "nats-echo-bench: cannot connect to %s\n", url);
        free(payload);
        goto done;
    }
    samples = calloc(requests, sizeof samples[0]);
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
