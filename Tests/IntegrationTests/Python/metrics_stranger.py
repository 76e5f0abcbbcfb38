"""A stranger on the metrics port: idle connections, a slowloris, a flood, then a scrape.
usage: metrics_stranger.py HOST PORT
Prints one `name value` line per step."""
import socket
import sys
import time
import urllib.request

host, port = sys.argv[1], int(sys.argv[2])


def closed(connection):
    """Whether the server closed it (reads what it sent, if anything, until EOF or nothing more)."""
    connection.setblocking(False)
    try:
        while True:
            data = connection.recv(4096)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def wait_closed(connections, limit):
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if all(closed(c) for c in connections):
            return time.monotonic() - start
        time.sleep(0.1)
    return -1


idle = [socket.create_connection((host, port)) for _ in range(40)]
time.sleep(0.5)
print("refused_at_once", sum(1 for c in idle if closed(c)), flush=True)
print("idle_closed_after", round(wait_closed(idle, 15), 1), flush=True)
for c in idle:
    c.close()

slow = socket.create_connection((host, port))
slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
start = time.monotonic()
gone = -1
while time.monotonic() - start < 15:
    try:
        slow.sendall(b"X-Slow: 1\r\n")
    except OSError:
        gone = time.monotonic() - start
        break
    if closed(slow):
        gone = time.monotonic() - start
        break
    time.sleep(0.5)
print("slowloris_closed_after", round(gone, 1), flush=True)
slow.close()

flood = []
for _ in range(600):
    try:
        flood.append(socket.create_connection((host, port), timeout=2))
    except OSError:
        pass
print("flood_opened", len(flood), flush=True)
for c in flood:
    c.close()

for _ in range(50):
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
            print("scrape", response.status, len(response.read()), flush=True)
            break
    except OSError:
        time.sleep(0.2)
else:
    print("scrape failed", flush=True)
