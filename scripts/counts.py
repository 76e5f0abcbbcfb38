#!/usr/bin/env python3
"""What one echo round trip costs each role, in counts that do not drift with the machine.

Each role (broker, board, client; the C baseline's proxy, echo and client) runs under valgrind:
callgrind counts the instructions of each of its threads, DHAT its heap allocations. Every load
runs twice, with LOW and HIGH serial round trips of 100 B, and the difference divided by
HIGH - LOW is the cost of one round trip, start-up and warm-up excluded. The socket loops' ticks
(ten a second, whatever the traffic) are left out of it and shown per tick: under valgrind the
same round trips take more seconds on a slower or busier machine.

    scripts/counts.py [--check THRESHOLDS] [--write THRESHOLDS] [--only raw,cbor,c] [--json OUT]
    scripts/counts.py --saturated

With --saturated, only the broker is counted, under load instead of one call at a time: the
motherboard (raw echo) and the C zmq_proxy each under callgrind, its echo without valgrind, and
4 connections with 100 requests in flight each (the baseline's raw clients), for SATURATED
seconds twice; the round trips made in the longer run past the shorter divide the difference.
Under callgrind the broker is the slowest process, so it runs saturated, as it does on many
cores: what one round trip costs it when every wake-up finds a batch of messages.

Run through `scripts/bench --counts` (which builds the release binaries first). With --check,
exits 1 when a BoardBus count passes its committed threshold (scripts/test runs it).
"""
import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILT = os.path.join(ROOT, ".build", "release")
# Copies of the release binaries without their DWARF (valgrind 3.19 cannot read DWARF 5), with
# their symbol tables, which name the functions: set by main().
BIN = None
EXECUTABLES = ("motherboard", "bench-echo-board", "boardbus-bench", "zmq-baseline-proxy", "zmq-baseline-echo", "zmq-baseline-client")
LOW, HIGH = 200, 1200
PAYLOAD = 100
# The size of a BoardBus request header for the echo and the 0 byte that ends it
# (`boardbus-bench count-header-bytes`): the baseline's client sends these bytes and the
# payload, so both move the same bytes.
HEADER = 41

# How a thread is told apart in a callgrind file, by the exported functions it runs (Debian's
# libzmq has no symbols for its internals): the loop thread (BoardBus's socket loop, the C
# programs' main thread) runs the loop (`SocketLoop.run`, mangled) or receives messages through
# the libzmq API; libzmq's I/O thread waits in epoll_wait and receives nothing through the API.
# A board's main thread hands work to its loop (`SocketLoop.enqueue`) but runs no loop. Of each
# kind, the busiest thread is the one.
LOOP_MARKS = ("SocketLoopC3run", "zmq_proxy", "zmq_msg_recv", "zmq_recv")
IO_MARKS = ("epoll_wait",)


class Failure(Exception):
    pass


def valgrind(tool, prefix):
    if tool is None:
        return []
    if tool == "callgrind":
        return ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={prefix}.%p", f"--log-file={prefix}.%p.log"]
    return ["valgrind", "--tool=dhat", f"--dhat-out-file={prefix}.%p.dhat", f"--log-file={prefix}.%p.log"]


def wait(process, seconds, what):
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise Failure(f"{what} did not finish in {seconds} s")


def read_line(process, prefix, seconds, what):
    """The first line of the process's output that starts with `prefix`, within `seconds`."""
    deadline = time.monotonic() + seconds
    os.set_blocking(process.stdout.fileno(), False)
    buffer = b""
    while time.monotonic() < deadline:
        chunk = process.stdout.read()
        if chunk:
            buffer += chunk
            for line in buffer.split(b"\n"):
                if line.startswith(prefix):
                    return line
        if process.poll() is not None:
            raise Failure(f"{what} ended ({process.returncode}) before it was ready")
        time.sleep(0.05)
    raise Failure(f"{what} not ready in {seconds} s")


def stop(target, seconds):
    """SIGTERM to a process this script started (a Popen, or the pid of one the broker started
    for it), then waits for it to end; a Popen is reaped."""
    pid = target.pid if isinstance(target, subprocess.Popen) else target
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if isinstance(target, subprocess.Popen):
        wait(target, seconds, f"pid {pid} after SIGTERM")
        return
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    raise Failure(f"pid {pid} did not stop in {seconds} s")


@contextlib.contextmanager
def broker_and_echo(directory, broker_tool, echo_tool, baseline):
    """Starts a broker and its echo, each under its valgrind tool (None: without valgrind), and
    yields the broker's endpoint and the environment to call it with; stops both after. BoardBus's
    echo board is started here, outside the manifest (as a board of another program would be): the
    broker's launcher cannot spawn under valgrind."""
    environment = dict(os.environ)
    environment.pop("BOARDBUS_ADDRESS", None)
    if baseline:
        front, back = f"ipc://{directory}/front.sock", f"ipc://{directory}/back.sock"
        broker_command, echo_command, endpoint = [f"{BIN}/zmq-baseline-proxy", front, back], [f"{BIN}/zmq-baseline-echo", back], front
        names = ("the baseline proxy", "the baseline echo")
    else:
        runtime, state = f"{directory}/run", f"{directory}/state"
        environment.update(BOARDBUS_RUNTIME_DIR=runtime, BOARDBUS_STATE_DIR=state)
        broker_command = [f"{BIN}/motherboard", "--runtime-dir", runtime, "--state-dir", state, "--log-max-bytes", "0"]
        echo_command, endpoint = [f"{BIN}/bench-echo-board"], f"ipc://{runtime}/motherboard.sock"
        names = ("the motherboard", "the echo board")
    broker = subprocess.Popen(
        valgrind(broker_tool, f"{directory}/broker") + broker_command,
        stdout=subprocess.PIPE, stderr=open(f"{directory}/broker.stderr", "wb"), stdin=subprocess.DEVNULL, env=environment)
    echo = None
    try:
        read_line(broker, b"READY", 300, names[0])
        echo = subprocess.Popen(
            valgrind(echo_tool, f"{directory}/board") + echo_command,
            stdout=subprocess.PIPE, stderr=open(f"{directory}/board.stderr", "wb"), stdin=subprocess.DEVNULL,
            env=dict(environment, BOARDBUS_BOARD_ID="bench.echo"))
        read_line(echo, b"READY", 300, names[1])
        yield endpoint, environment
    finally:
        for process in (echo, broker):
            if process is not None and process.poll() is None:
                stop(process, 180)


def run_boardbus(directory, tool, requests, command, content):
    """One load of the real motherboard and echo board, each under `tool`, with the bench's client."""
    with broker_and_echo(directory, tool, tool, baseline=False) as (endpoint, environment):
        arguments = ["count-client", str(requests), "--endpoint", endpoint, "--command", command]
        if content:
            arguments += ["--format", content]
        client = subprocess.Popen(
            valgrind(tool, f"{directory}/client") + [f"{BIN}/boardbus-bench"] + arguments,
            stdout=subprocess.PIPE, stderr=open(f"{directory}/client.stderr", "wb"), stdin=subprocess.DEVNULL, env=environment)
        if wait(client, 900, "the client") != 0:
            raise Failure(f"the client failed: {open(f'{directory}/client.stderr').read()[-2000:]}")


def run_baseline(directory, tool, requests, frames):
    with broker_and_echo(directory, tool, tool, baseline=True) as (endpoint, _):
        client = subprocess.Popen(
            valgrind(tool, f"{directory}/client") + [f"{BIN}/zmq-baseline-client", endpoint, str(requests), str(HEADER if frames == 1 else HEADER - 1), str(PAYLOAD), str(frames)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        if wait(client, 900, "the baseline client") != 0:
            raise Failure("the baseline client failed")


# The periodic tick of a BoardBus socket loop (`SocketLoopHandler.tick(on:)`, mangled): heartbeats,
# deadlines and sweeps that run ten times a second whatever the traffic. Under valgrind the same
# round trips take more or fewer seconds from one machine (or one load) to the next, so its cost is
# taken out of the per-round-trip counts and shown on a row of its own, per tick.
TICK_MARK = "4tick2on"
NAME = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?")


def tick_cost(text):
    """Instructions spent in the thread's ticks (inclusive, counted at each call from outside a
    tick, so that a witness calling its implementation counts once) and how many ticks ran."""
    names, caller, callee, instructions, ticks = {}, None, None, 0, 0
    lines = iter(text.splitlines())
    for line in lines:
        if line.startswith(("fn=", "cfn=")):
            match = NAME.match(line)
            if match.group(2):
                names[match.group(1)] = match.group(2)
            if line.startswith("fn="):
                caller = match.group(1)
            else:
                callee = match.group(1)
        elif line.startswith("calls="):
            # The line after `calls=` holds the calls' inclusive cost.
            cost = next(lines, "").split()
            if TICK_MARK in names.get(callee, "") and TICK_MARK not in names.get(caller, ""):
                ticks += int(line[len("calls="):].split()[0])
                instructions += int(cost[1]) if len(cost) > 1 else 0
    return instructions, ticks


def callgrind_threads(directory, role):
    """Instructions of each thread of one role's process: [(instructions, kind, tick instructions,
    ticks)], kind 'loop', 'io' or 'other'; the tick's are part of the first."""
    files = [path for path in glob.glob(f"{directory}/{role}.*") if re.search(r"\.\d+-\d+$", path)]
    if not files:
        raise Failure(f"no callgrind output for the {role} in {directory}")
    threads = []
    for path in files:
        text = open(path, errors="replace").read()
        match = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        kind = "loop" if any(mark in text for mark in LOOP_MARKS) else "io" if any(mark in text for mark in IO_MARKS) else "other"
        threads.append((int(match.group(1)) if match else 0, kind, *tick_cost(text)))
    return threads


def per_round_trip_threads(low, high):
    """Per round trip, ticks left out: the busiest loop thread, the busiest I/O thread, the whole
    process; and the instructions of one tick of the loop thread. Threads are paired across the two
    runs by kind, not by number: threads started at the same moment (a loop thread and libzmq's I/O
    thread) are numbered in whichever order they won the race."""

    def busiest(threads, kind):
        return max(((count - ticked, ticked, ticks) for count, each, ticked, ticks in threads if each == kind), default=(0, 0, 0))

    result = {kind: (busiest(high, kind)[0] - busiest(low, kind)[0]) / (HIGH - LOW) for kind in ("loop", "io")}
    result["process"] = (sum(count - ticked for count, _, ticked, _ in high) - sum(count - ticked for count, _, ticked, _ in low)) / (HIGH - LOW)
    _, ticked, ticks = busiest(high, "loop")
    result["tick"] = ticked / ticks if ticks else 0
    return result


def dhat_blocks(directory, role):
    logs = [path for path in glob.glob(f"{directory}/{role}.*.log") if os.path.exists(path)]
    for path in logs:
        match = re.search(r"Total:\s+([\d,]+) bytes in ([\d,]+) blocks", open(path).read())
        if match:
            return int(match.group(2).replace(",", ""))
    raise Failure(f"no DHAT total for the {role} in {directory}")


LOADS = {
    "c": ("C zmq_proxy", None, None),
    # The baseline in two frames (header, payload), as protocol version 3 sent a message.
    "c2": ("C zmq_proxy, two frames", None, None),
    "raw": ("BoardBus raw echo", "echo.raw", None),
    "cbor": ("BoardBus typed CBOR echo", "echo", "cbor"),
}
ROLES = ("broker", "board", "client")


def measure(load, work):
    """Per round trip, for each role: instructions of its loop thread, its libzmq I/O thread and
    the whole process, and its heap allocations."""
    runs = {}
    for tool in ("callgrind", "dhat"):
        for requests in (LOW, HIGH):
            directory = tempfile.mkdtemp(prefix=f"counts-{load}-{tool}-{requests}-", dir=work)
            print(f"counts: {load} {tool} {requests} round trips", file=sys.stderr, flush=True)
            if load in ("c", "c2"):
                run_baseline(directory, tool, requests, 2 if load == "c2" else 1)
            else:
                run_boardbus(directory, tool, requests, LOADS[load][1], LOADS[load][2])
            for role in ROLES:
                runs[(tool, role, requests)] = callgrind_threads(directory, role) if tool == "callgrind" else dhat_blocks(directory, role)
    results = {}
    for role in ROLES:
        for key, value in per_round_trip_threads(runs[("callgrind", role, LOW)], runs[("callgrind", role, HIGH)]).items():
            results[f"{role}.{key}"] = value
        results[f"{role}.allocations"] = (runs[("dhat", role, HIGH)] - runs[("dhat", role, LOW)]) / (HIGH - LOW)
    return results


SATURATED = (3, 6)


def run_saturated(directory, seconds, baseline):
    """One saturated load of the broker (see --saturated): the broker under callgrind, its echo
    without valgrind; returns the round trips made."""
    with broker_and_echo(directory, "callgrind", None, baseline) as (endpoint, environment):
        client = subprocess.run(
            [f"{BIN}/boardbus-bench", "load", str(seconds), "--endpoint", endpoint, "--command", "echo.raw",
             "--clients", "4", "--window", "100"],
            capture_output=True, timeout=seconds + 120, env=environment)
        match = re.search(rb"round trips: (\d+)", client.stdout)
        if client.returncode != 0 or not match:
            raise Failure(f"the load failed: {client.stderr.decode(errors='replace')[-2000:]}")
        return int(match.group(1))


def measure_saturated(work):
    """Per round trip of a saturated broker: its loop thread, I/O thread and process, for the C
    baseline ("c") and BoardBus ("raw")."""
    results = {}
    for load, baseline in (("c", True), ("raw", False)):
        runs = []
        for seconds in SATURATED:
            directory = tempfile.mkdtemp(prefix=f"counts-saturated-{load}-{seconds}-", dir=work)
            print(f"counts: saturated {load}, {seconds} s", file=sys.stderr, flush=True)
            round_trips = run_saturated(directory, seconds, baseline)
            runs.append((round_trips, callgrind_threads(directory, "broker")))
        (low_trips, low), (high_trips, high) = runs
        if high_trips <= low_trips:
            raise Failure(f"the longer load made no more round trips ({low_trips}, {high_trips})")
        per = {key: value * (HIGH - LOW) / (high_trips - low_trips) for key, value in per_round_trip_threads(low, high).items() if key != "tick"}
        results[load] = {f"broker.{key}": value for key, value in per.items()}
        results[load]["round trips"] = high_trips - low_trips
    return results


def render_saturated(results):
    rows = [
        ("broker loop thread: instructions", "broker.loop"),
        ("broker libzmq I/O thread: instructions", "broker.io"),
        ("broker process: instructions", "broker.process"),
    ]
    lines = ["| per round trip, saturated (4×100) | C zmq_proxy | BoardBus raw echo | BoardBus / C |", "|---|---|---|---|"]
    for label, key in rows:
        base, value = results["c"][key], results["raw"][key]
        lines.append(f"| {label} | {base:,.1f} | {value:,.1f} | {value / base:.2f}× |")
    lines.append(f"| round trips counted | {results['c']['round trips']:,} | {results['raw']['round trips']:,} | |")
    return "\n".join(lines)


def render(results):
    rows = [
        ("broker loop thread: instructions", "broker.loop"),
        ("broker libzmq I/O thread: instructions", "broker.io"),
        ("broker process: instructions", "broker.process"),
        ("broker process: allocations", "broker.allocations"),
        ("board loop thread: instructions", "board.loop"),
        ("board libzmq I/O thread: instructions", "board.io"),
        ("board process: instructions", "board.process"),
        ("board process: allocations", "board.allocations"),
        ("client loop thread: instructions", "client.loop"),
        ("client libzmq I/O thread: instructions", "client.io"),
        ("client process: instructions", "client.process"),
        ("client process: allocations", "client.allocations"),
        ("broker loop thread: instructions per tick (left out above)", "broker.tick"),
        ("board loop thread: instructions per tick (left out above)", "board.tick"),
        ("client loop thread: instructions per tick (left out above)", "client.tick"),
    ]
    loads = [load for load in ("c", "c2", "raw", "cbor") if load in results]
    header = "| per round trip | " + " | ".join(LOADS[load][0] for load in loads)
    if "c" in results:
        header += " | " + " | ".join(f"{LOADS[load][0].split(' ', 1)[1]} / C" for load in loads if load not in ("c", "c2"))
    lines = [header + " |", "|" + "---|" * (header.count("|"))]
    for label, key in rows:
        cells = [f"{results[load].get(key, 0):,.1f}" for load in loads]
        if "c" in results:
            base = results["c"].get(key, 0)
            # No ratio to a count under one (an allocation now and then is not a baseline).
            cells += [f"{results[load].get(key, 0) / base:.2f}×" if base >= 1 else "–" for load in loads if load not in ("c", "c2")]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The counts a change must not raise, and the margin each gets over what was measured: a few
# percent of instructions (what a run varies by is under 1.5 %), and no new allocation.
CHECKED = ("broker.loop", "broker.process", "broker.allocations", "board.loop", "board.process", "board.allocations",
           "client.loop", "client.process", "client.allocations")
INSTRUCTION_MARGIN = 1.05
ALLOCATION_MARGIN = 0.5


def write_thresholds(path, results):
    limits = {}
    for load in results:
        if load in ("c", "c2"):
            continue
        for key in CHECKED:
            value = results[load][key]
            limits[f"{load}/{key}"] = round(value + ALLOCATION_MARGIN, 1) if key.endswith("allocations") else round(value * INSTRUCTION_MARGIN)
    document = {
        "how": f"What one round trip may cost each BoardBus role, per scripts/counts.py: measured "
        f"{time.strftime('%Y-%m-%d')} (valgrind {subprocess.run(['valgrind', '--version'], capture_output=True, text=True).stdout.strip()}), "
        f"instructions +{round((INSTRUCTION_MARGIN - 1) * 100)} %, allocations +{ALLOCATION_MARGIN}. "
        "Lower them when a change lowers the counts: scripts/bench --counts --write scripts/counts-thresholds.json",
        "measured": {load: {key: round(results[load][key], 1) for key in sorted(results[load])} for load in results},
        "limits": limits,
    }
    with open(path, "w") as file:
        json.dump(document, file, indent=2, sort_keys=True)
        file.write("\n")


def measured(work, keep, measure):
    """What `measure()` returns; valgrind's outputs in `work` are kept when it fails or with
    --keep (their directory is printed), else removed."""
    try:
        result = measure()
    except Failure as failure:
        sys.exit(f"counts: {failure} (outputs kept in {work})")
    if keep:
        print(f"counts: valgrind's outputs are in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="c,raw,cbor", help="loads to measure: c, c2 (the C baseline in two frames, as version 3), raw, cbor (comma-separated)")
    parser.add_argument("--check", help="fail when a count passes its threshold in this file")
    parser.add_argument("--write", help="write the counts measured as thresholds to this file (with the margins in it, if it exists)")
    parser.add_argument("--json", help="also write the counts measured to this file")
    parser.add_argument("--keep", action="store_true", help="keep valgrind's outputs (their directory is printed)")
    parser.add_argument("--saturated", action="store_true", help="count the broker under load instead (see the top of this file)")
    arguments = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("counts: valgrind is missing (apt-get install valgrind)")
    loads = [load.strip() for load in arguments.only.split(",") if load.strip()]
    if arguments.check:
        thresholds = json.load(open(arguments.check))
        loads = sorted({key.split("/")[0] for key in thresholds["limits"]})
    work = tempfile.mkdtemp(prefix="boardbus-counts-")
    global BIN
    BIN = f"{work}/bin"
    os.mkdir(BIN)
    for name in EXECUTABLES:
        if os.path.exists(f"{BUILT}/{name}"):
            subprocess.run(["objcopy", "--strip-debug", f"{BUILT}/{name}", f"{BIN}/{name}"], check=True)
    if arguments.saturated:
        print(render_saturated(measured(work, arguments.keep, lambda: measure_saturated(work))))
        return
    results = measured(work, arguments.keep, lambda: {load: measure(load, work) for load in loads})
    print(render(results))
    if arguments.json:
        with open(arguments.json, "w") as file:
            json.dump(results, file, indent=2, sort_keys=True)
    if arguments.write:
        write_thresholds(arguments.write, results)
    if arguments.check:
        failed = []
        for key, limit in sorted(thresholds["limits"].items()):
            load, name = key.split("/")
            value = results[load][name]
            verdict = "ok" if value <= limit else "OVER"
            print(f"{verdict:4} {key}: {value:,.1f} (limit {limit:,.1f})")
            if value > limit:
                failed.append(key)
            elif value < limit * 0.9 - 1:
                print(f"     {key} is well under its threshold: lower it (scripts/bench --counts --write {arguments.check})")
        if failed:
            sys.exit(f"counts: past their thresholds: {', '.join(failed)} ({arguments.check} says how they were set)")


if __name__ == "__main__":
    main()
