#!/usr/bin/env python3
"""Times MDP round trips with majortomo's client: N requests [b"echo", 100-byte JSON] to SERVICE,
one at a time after a warm-up of N/10; prints one JSON line: p50 and p99 in µs, and the rate.

usage: roundtrip.py ENDPOINT SERVICE N
"""
import json
import sys
import time

from majortomo import Client


def main():
    endpoint, service, count = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    payload = json.dumps({"data": "x" * 89}).encode()
    times = []
    with Client(endpoint) as client:
        for index in range(count + count // 10):
            start = time.perf_counter_ns()
            client.send(service, b"echo", payload)
            reply = client.recv_all_as_list(timeout=10)
            elapsed = time.perf_counter_ns() - start
            if reply != [payload]:
                raise SystemExit("unexpected reply: %r" % reply[:2])
            if index >= count // 10:
                times.append(elapsed)
    times.sort()
    total = sum(times) / 1e9
    print(json.dumps({"p50": times[len(times) // 2] / 1000, "p99": times[int(len(times) * 0.99)] / 1000, "rate": len(times) / total}))


if __name__ == "__main__":
    main()
