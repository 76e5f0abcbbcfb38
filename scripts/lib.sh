# Shared by scripts/fleet, scripts/test and scripts/bench: make sure libzmq's headers (and, for the
# protocol test of a board written in Python, Debian's pyzmq) are installed.
# Sourced, not run.

ensure_libzmq() {
    if [ -f /usr/include/zmq.h ] && pkg-config --exists libzmq 2>/dev/null \
        && /usr/bin/python3 -c 'import zmq' 2>/dev/null; then
        return 0
    fi
    echo "==> installing libzmq3-dev and python3-zmq with apt-get" >&2
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libzmq3-dev pkg-config python3 python3-zmq >&2
}

# The metrics tests check the exposition with prometheus_client's own parser, from PyPI, for
# Debian's python3 (the one the tests run).
ensure_prometheus_client() {
    if /usr/bin/python3 -c 'import prometheus_client.parser' 2>/dev/null; then return 0; fi
    echo "==> installing prometheus_client from PyPI (pip --user)" >&2
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

repo_root() {
    cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd
}
