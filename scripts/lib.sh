# Shared by scripts/fleet, scripts/test and scripts/bench: make sure the headers the build needs
# (libzmq's, and libnats's for the motherboard's NATS gateway) and, for the protocol tests of
# boards written in Python, Debian's pyzmq and cbor2 are installed.
# Sourced, not run.

ensure_libzmq() {
    if [ -f /usr/include/zmq.h ] && pkg-config --exists libzmq 2>/dev/null && [ -f /usr/include/nats/nats.h ] \
        && /usr/bin/python3 -c 'import zmq, cbor2' 2>/dev/null; then
        return 0
    fi
    echo "==> installing libzmq3-dev, libnats-dev, python3-zmq and python3-cbor2 with apt-get" >&2
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libzmq3-dev libnats-dev pkg-config python3 python3-zmq python3-cbor2 >&2
}

# The NATS tests: Debian's nats-server (the cluster's nodes), openssl (their TLS certificates)
# and nats-py 2.16.0 from PyPI (the third-party client that calls a board by its subject).
ensure_nats_peers() {
    if [ ! -x /usr/sbin/nats-server ] || ! command -v openssl >/dev/null 2>&1; then
        echo "==> installing nats-server and openssl with apt-get" >&2
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        $sudo apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nats-server openssl >&2
    fi
    if /usr/bin/python3 -c 'import nats' 2>/dev/null; then return 0; fi
    echo "==> installing nats-py 2.16.0 from PyPI (pip --user)" >&2
    /usr/bin/python3 -m pip install --quiet --user --break-system-packages nats-py==2.16.0 >&2 \
        || /usr/bin/python3 -m pip install --quiet --user nats-py==2.16.0 >&2
}

# The metrics tests check the exposition with prometheus_client's own parser, from PyPI, for
# Debian's python3 (the one the tests run).
ensure_prometheus_client() {
    if /usr/bin/python3 -c 'import prometheus_client.parser' 2>/dev/null; then return 0; fi
    echo "==> installing python3-prometheus-client with apt-get" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    if $sudo apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-prometheus-client >&2; then
        return 0
    fi
    # Where Debian has no package for it: from PyPI, for this user only.
    echo "==> apt-get could not install it; prometheus_client from PyPI (pip --user)" >&2
    /usr/bin/python3 -m pip install --quiet --user --break-system-packages prometheus_client >&2 \
        || /usr/bin/python3 -m pip install --quiet --user prometheus_client >&2
}

# The Majordomo tests and bench rows use majortomo 0.2.0 (an MDP implementation in Python, from
# PyPI) as the third-party client, worker and broker.
ensure_majortomo() {
    if /usr/bin/python3 -c 'import majortomo' 2>/dev/null; then return 0; fi
    echo "==> installing majortomo 0.2.0 from PyPI (pip --user)" >&2
    /usr/bin/python3 -m pip install --quiet --user --break-system-packages majortomo==0.2.0 >&2 \
        || /usr/bin/python3 -m pip install --quiet --user majortomo==0.2.0 >&2
}

# The across-hosts test makes network namespaces with iproute2's `ip` (as root; without it, or
# without root, it runs over 127.0.0.1 and says so).
ensure_iproute2() {
    if command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ]; then return 0; fi
    echo "==> installing iproute2 with apt-get" >&2
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        # Without root the test cannot make namespaces anyway: do not ask for a password for it.
        command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || return 0
        sudo="sudo"
    fi
    $sudo apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq iproute2 >&2 || echo "==> iproute2 not installed: the across-hosts test runs over 127.0.0.1" >&2
}

# The counts (scripts/counts.py): valgrind, and objcopy (binutils) to drop the DWARF that
# valgrind 3.19 cannot read from copies of the binaries.
ensure_valgrind() {
    if command -v valgrind >/dev/null 2>&1 && command -v objcopy >/dev/null 2>&1; then return 0; fi
    echo "==> installing valgrind and binutils with apt-get" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq valgrind binutils >&2
}

# The bench's rows against NATS and D-Bus: Debian's nats-server and dbus-broker, and the C
# harnesses in scripts/bench-peers built on libnats-dev and libdbus-1-dev into .build/bench-peers.
# Anything missing that apt-get cannot install leaves those rows out (the bench says why).
ensure_bench_peers() {
    local root="$1" out="$1/.build/bench-peers"
    local missing=()
    [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
    [ -f /usr/include/nats/nats.h ] || missing+=(libnats-dev)
    [ -x /usr/bin/dbus-broker-launch ] || missing+=(dbus-broker)
    pkg-config --exists dbus-1 2>/dev/null || missing+=(libdbus-1-dev)
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "==> installing ${missing[*]} with apt-get (the bench's NATS and D-Bus rows)" >&2
        local sudo=""
        if [ "$(id -u)" -ne 0 ]; then
            if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo"; else
                echo "==> not root: the NATS and D-Bus rows are left out unless ${missing[*]} are installed" >&2
            fi
        fi
        if [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; then
            $sudo apt-get update -qq >&2 || true
            DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" pkg-config >&2 \
                || echo "==> apt-get could not install ${missing[*]}: those rows are left out" >&2
        fi
    fi
    mkdir -p "$out"
    local src="$root/scripts/bench-peers"
    if [ -f /usr/include/nats/nats.h ]; then
        cc -O2 -Wall -o "$out/nats-echo-bench" "$src/nats-echo-bench.c" -I"$src" -lnats >&2 \
            || echo "==> the NATS harness did not build: its rows are left out" >&2
    fi
    if pkg-config --exists dbus-1 2>/dev/null; then
        # shellcheck disable=SC2046
        cc -O2 -Wall -o "$out/dbus-echo-bench" "$src/dbus-echo-bench.c" -I"$src" $(pkg-config --cflags --libs dbus-1) >&2 \
            || echo "==> the D-Bus harness did not build: its rows are left out" >&2
    fi
}

repo_root() {
    cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd
}

# Installs Debian packages with apt-get (sudo when not root), saying what they are for.
apt_install() {
    local why="$1" sudo=""
    shift
    echo "==> installing $* with apt-get: $why" >&2
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >&2
}

# promtool checks and unit-tests the Prometheus rules in fleet/prometheus (Debian's prometheus
# package; its server is not started by scripts/test).
ensure_promtool() {
    command -v promtool > /dev/null || apt_install "promtool checks the alert rules" prometheus
}

# dot draws the README's picture of the example fleet (Debian's graphviz).
ensure_graphviz() {
    command -v dot > /dev/null || apt_install "dot draws the README's picture" graphviz
}
