"""Connection flood: opens COUNT connections to ENDPOINT (ipc://PATH or tcp://HOST:PORT), sends
nothing on them, and holds them for SECONDS (or until stdin closes). Prints `open N failed M` once
it has tried them all, and `held H` a second later: how many the server has not closed. Raises its
own descriptor limit to the hard one first."""
import resource
import select
import socket
import sys
import time

endpoint, count, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
_, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, failed = [], 0
for _ in range(count):
    try:
        if endpoint.startswith("ipc://"):
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(endpoint[len("ipc://"):])
        else:
            host, port = endpoint[len("tcp://"):].rsplit(":", 1)
            connection = socket.create_connection((host, int(port)), timeout=5)
        held.append(connection)
    except OSError:
        failed += 1
print(f"open {len(held)} failed {failed}", flush=True)


def closed(connection):
    """Whether the server closed it (what it sent, a greeting, is read first)."""
    connection.setblocking(False)
    try:
        while True:
            if not connection.recv(4096):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


time.sleep(1)
print(f"held {sum(1 for c in held if not closed(c))}", flush=True)
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    ready, _, _ = select.select([sys.stdin], [], [], 0.2)
    if ready and not sys.stdin.readline():
        break
for connection in held:
    connection.close()
