/* The bench's D-Bus rows: a method call round trip through dbus-broker on a private bus, and a load.
 *
 *   dbus-echo-bench DBUS_BROKER_LAUNCH DIR BYTES REQUESTS WARMUP
 *   dbus-echo-bench DBUS_BROKER_LAUNCH DIR BYTES load CONNECTIONS WINDOW SECONDS
 *
 * Listens on DIR/bus.sock and starts dbus-broker-launch on it (socket activation, a bus
 * configuration of its own in DIR/bus.conf), a service process that owns org.boardbus.BenchEcho
 * and answers Echo(ay) with the bytes it got, and then, as the client (libdbus-1), makes
 * REQUESTS + WARMUP calls of BYTES bytes one at a time (send_with_reply_and_block).
 * Prints "p50_us p99_us serial_rate". With `load`: CONNECTIONS connections, a thread each, each
 * keeping WINDOW calls in flight (sent with dbus_connection_send; each method return read from
 * the connection sends the next call), and prints the returns per second over SECONDS, after
 * 0.3 s not counted. Stops what it started, by pid.
 *
 * dbus-broker-launch logs only to journald's socket and will not start without it; where there
 * is none (a container), it runs in a mount namespace of its own (root only) with a stand-in
 * socket on a tmpfs over /run/systemd, which nobody reads (its logging is lossy). */
#define _GNU_SOURCE
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <dbus/dbus.h>
#include <pthread.h>

#include "peer-common.h"

#define NAME "org.boardbus.BenchEcho"
#define PATH "/org/boardbus/BenchEcho"

static const char *configuration =
    "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
    " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
    "<busconfig>\n"
    "  <type>session</type>\n"
    "  <auth>EXTERNAL</auth>\n"
    "  <policy context=\"default\">\n"
    "    <allow user=\"*\"/>\n"
    "    <allow send_destination=\"*\"/>\n"
    "    <allow receive_sender=\"*\"/>\n"
    "    <allow own=\"*\"/>\n"
    "  </policy>\n"
    "</busconfig>\n";

static DBusConnection *connect_to(const char *address, int attempts) {
    for (int i = 0; i < attempts; i++) {
        DBusError error;
        dbus_error_init(&error);
        DBusConnection *connection = dbus_connection_open_private(address, &error);
        if (connection != NULL && dbus_bus_register(connection, &error)) return connection;
        if (connection != NULL) {
            dbus_connection_close(connection);
            dbus_connection_unref(connection);
        }
        dbus_error_free(&error);
        usleep(20000);
    }
    return NULL;
}

/* The service: answers Echo with the same bytes until it is stopped. */
static void serve(const char *address, int ready) {
    DBusConnection *connection = connect_to(address, 250);
    if (connection == NULL) _exit(1);
    DBusError error;
    dbus_error_init(&error);
    if (dbus_bus_request_name(connection, NAME, DBUS_NAME_FLAG_DO_NOT_QUEUE, &error) != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER) _exit(1);
    (void)!write(ready, "r", 1);
    while (dbus_connection_read_write(connection, -1)) {
        DBusMessage *message;
        while ((message = dbus_connection_pop_message(connection)) != NULL) {
            if (dbus_message_is_method_call(message, NAME, "Echo")) {
                const unsigned char *data = NULL;
                int length = 0;
                DBusMessage *reply;
                if (dbus_message_get_args(message, NULL, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &data, &length, DBUS_TYPE_INVALID)) {
                    reply = dbus_message_new_method_return(message);
                    dbus_message_append_args(reply, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &data, length, DBUS_TYPE_INVALID);
                } else {
                    reply = dbus_message_new_error(message, DBUS_ERROR_INVALID_ARGS, "Echo takes ay");
                }
                dbus_connection_send(connection, reply, NULL);
                dbus_message_unref(reply);
            }
            dbus_message_unref(message);
        }
        dbus_connection_flush(connection);
    }
    _exit(0);
}

/* One loaded connection, on a thread of its own. */
typedef struct {
    const char *address;
    const unsigned char *payload;
    int bytes;
    int window;
    volatile uint64_t done;
    volatile int stopping;
    volatile int failed;
} load_t;

static void send_call(DBusConnection *connection, const unsigned char *payload, int bytes) {
    DBusMessage *call = dbus_message_new_method_call(NAME, PATH, NAME, "Echo");
    dbus_message_append_args(call, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &payload, bytes, DBUS_TYPE_INVALID);
    dbus_connection_send(connection, call, NULL);
    dbus_message_unref(call);
}

static void *load_thread(void *argument) {
    load_t *load = argument;
    DBusConnection *connection = connect_to(load->address, 250);
    if (connection == NULL) {
        load->failed = 1;
        return NULL;
    }
    for (int i = 0; i < load->window; i++) send_call(connection, load->payload, load->bytes);
    while (!load->stopping && dbus_connection_read_write(connection, 100)) {
        DBusMessage *message;
        while ((message = dbus_connection_pop_message(connection)) != NULL) {
            if (dbus_message_get_type(message) == DBUS_MESSAGE_TYPE_METHOD_RETURN) {
                __atomic_add_fetch(&load->done, 1, __ATOMIC_RELAXED);
                if (!load->stopping) send_call(connection, load->payload, load->bytes);
            }
            dbus_message_unref(message);
        }
    }
    dbus_connection_close(connection);
    dbus_connection_unref(connection);
    return NULL;
}

/* The load: CONNECTIONS threads, each WINDOW calls in flight; prints the rate. */
static int run_load(const char *address, const unsigned char *payload, int bytes, int connections, int window, double seconds) {
    pthread_t threads[64];
    load_t loads[64];
    volatile uint64_t *done[64];
    int started = 0, status = 0;
    dbus_threads_init_default();
    for (int c = 0; c < connections; c++) {
        loads[c] = (load_t){.address = address, .payload = payload, .bytes = bytes, .window = window};
        done[c] = &loads[c].done;
        if (pthread_create(&threads[c], NULL, load_thread, &loads[c]) != 0) break;
        started++;
    }
    peer_measure_load(done, started, 300, seconds);
    for (int c = 0; c < started; c++) loads[c].stopping = 1;
    for (int c = 0; c < started; c++) {
        pthread_join(threads[c], NULL);
        if (loads[c].failed) status = 1;
    }
    if (status != 0 || started < connections) fprintf(stderr, "dbus-echo-bench: a load connection failed\n");
    return started < connections ? 1 : status;
}

#define JOURNAL "/run/systemd/journal/socket"

/* Where journald's socket is missing: a private mount namespace, a tmpfs over /run/systemd
 * (or /run), and a datagram socket bound at JOURNAL, left open for the launcher to inherit. */
static int stand_in_journal(void) {
    if (access(JOURNAL, F_OK) == 0) return 0;
    if (geteuid() != 0) return -1;
    const char *over = access("/run/systemd", F_OK) == 0 ? "/run/systemd" : "/run";
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0
        || mount("tmpfs", over, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
        return -1;
    }
    mkdir("/run/systemd", 0755);
    mkdir("/run/systemd/journal", 0755);
    struct sockaddr_un address = {.sun_family = AF_UNIX, .sun_path = JOURNAL};
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    return fd >= 0 && bind(fd, (struct sockaddr *)&address, sizeof address) == 0 ? 0 : -1;
}

/* dbus-broker-launch on `listener` (socket activation: fd 3, LISTEN_FDS=1). */
static pid_t spawn_launcher(char *const argv[], int listener, const char *address) {
    pid_t pid = peer_fork();
    if (pid != 0) return pid;
    if (stand_in_journal() != 0) _exit(3);
    /* The launcher connects to the bus it serves as a client: for the user scope, the session
     * bus address. */
    setenv("DBUS_SESSION_BUS_ADDRESS", address, 1);
    peer_exec_activated(argv, listener);
}

int main(int argc, char **argv) {
    int loaded = argc == 8 && strcmp(argv[4], "load") == 0;
    if (argc != 6 && !loaded) {
        fprintf(stderr, "usage: dbus-echo-bench DBUS_BROKER_LAUNCH DIR BYTES REQUESTS WARMUP\n"
                        "       dbus-echo-bench DBUS_BROKER_LAUNCH DIR BYTES load CONNECTIONS WINDOW SECONDS\n");
        return 2;
    }
    const char *directory = argv[2];
    size_t bytes = strtoul(argv[3], NULL, 10);
    size_t requests = loaded ? 1 : strtoul(argv[4], NULL, 10), warmup = loaded ? 0 : strtoul(argv[5], NULL, 10);
    int connections = loaded ? atoi(argv[5]) : 0, window = loaded ? atoi(argv[6]) : 0;
    double seconds = loaded ? atof(argv[7]) : 0;
    if (requests == 0 || (loaded && (connections < 1 || connections > 64 || window < 1 || seconds <= 0))) return 2;
    char config_path[512], address[600];
    struct sockaddr_un socket_address = {.sun_family = AF_UNIX};
    snprintf(config_path, sizeof config_path, "%s/bus.conf", directory);
    if (snprintf(socket_address.sun_path, sizeof socket_address.sun_path, "%s/bus.sock", directory) >= (int)sizeof socket_address.sun_path) {
        fprintf(stderr, "dbus-echo-bench: directory path too long\n");
        return 2;
    }
    snprintf(address, sizeof address, "unix:path=%s", socket_address.sun_path);
    FILE *file = fopen(config_path, "w");
    if (file == NULL || fputs(configuration, file) < 0 || fclose(file) != 0) return 1;
    unlink(socket_address.sun_path);
    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&socket_address, sizeof socket_address) != 0 || listen(listener, 64) != 0) {
        perror("dbus-echo-bench: listen");
        return 1;
    }
    char *launch_argv[] = {argv[1], "--scope", "user", "--config-file", config_path, NULL};
    pid_t broker = spawn_launcher(launch_argv, listener, address);
    close(listener);
    int ready[2];
    if (broker < 0 || pipe(ready) != 0) return 1;
    pid_t service = peer_fork();
    if (service == 0) {
        close(ready[0]);
        serve(address, ready[1]);
    }
    close(ready[1]);
    int status = 1;
    char byte;
    DBusConnection *connection = NULL;
    uint64_t *samples = calloc(requests, sizeof samples[0]);
    unsigned char *payload = malloc(bytes);
    memset(payload, 'x', bytes);
    if (read(ready[0], &byte, 1) != 1) {
        int launched = 0;
        if (waitpid(broker, &launched, WNOHANG) == broker && WIFEXITED(launched) && WEXITSTATUS(launched) == 3) {
            fprintf(stderr, "no journald socket (" JOURNAL "), which dbus-broker-launch needs, and no root to stand one in\n");
            broker = -1;
        } else {
            fprintf(stderr, "dbus-echo-bench: the service could not take its name on the bus\n");
        }
        goto done;
    }
    if (loaded) {
        status = run_load(address, payload, (int)bytes, connections, window, seconds);
        goto done;
    }
    connection = connect_to(address, 250);
    if (connection == NULL) {
        fprintf(stderr, "dbus-echo-bench: cannot connect to %s\n", address);
        goto done;
    }
    for (size_t i = 0; i < warmup + requests; i++) {
        DBusError error;
        dbus_error_init(&error);
        uint64_t start = peer_now_ns();
        DBusMessage *call = dbus_message_new_method_call(NAME, PATH, NAME, "Echo");
        const unsigned char *data = payload;
        dbus_message_append_args(call, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &data, (int)bytes, DBUS_TYPE_INVALID);
        DBusMessage *reply = dbus_connection_send_with_reply_and_block(connection, call, 5000, &error);
        dbus_message_unref(call);
        const unsigned char *echoed = NULL;
        int length = -1;
        if (reply != NULL) dbus_message_get_args(reply, NULL, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &echoed, &length, DBUS_TYPE_INVALID);
        uint64_t took = peer_now_ns() - start;
        if (reply == NULL || length != (int)bytes) {
            fprintf(stderr, "dbus-echo-bench: call %zu failed: %s\n", i, error.message ? error.message : "wrong reply");
            if (reply != NULL) dbus_message_unref(reply);
            dbus_error_free(&error);
            goto done;
        }
        dbus_message_unref(reply);
        if (i >= warmup) samples[i - warmup] = took;
    }
    peer_print_summary(samples, requests);
    status = 0;
done:
    if (connection != NULL) {
        dbus_connection_close(connection);
        dbus_connection_unref(connection);
    }
    peer_stop(service);
    peer_stop(broker);
    unlink(socket_address.sun_path);
    unlink(config_path);
    free(samples);
    free(payload);
    return status;
}
