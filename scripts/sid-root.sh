#!/usr/bin/env bash
# Runs a command in a Debian unstable (sid) root: CPython 3.14 and 3.15, a
# 3.14 debug build (python3.14d), gcc and redis-server, none of which the
# project's Debian stable machines have. The root is made with debootstrap
# the first time (about a minute and a half) and reused after that.
#
#   bash scripts/sid-root.sh [--root DIR] [--rebuild] [--writable-repo] -- COMMAND [ARGS...]
#
# For example, the whole suite on CPython 3.14 (PYTHON set out here, not with
# `-- env PYTHON=...`, so that VENV's default below follows it):
#
#   PYTHON=python3.14 bash scripts/sid-root.sh -- bash scripts/test.sh
#
# --root DIR       where the root lives (default: $REDIS_BACKOFF_C_SID_ROOT,
#                  else /var/cache/redis-backoff-c/sid-root: outside the
#                  checkout, so that git clean or a fresh clone leaves it be)
# --rebuild        make the root anew even when it is complete
# --writable-repo  bind the checkout itself at /repo: what the command writes
#                  there (build/, caches) stays, and lands in the checkout
# SID_MIRROR       the Debian archive to bootstrap from (default: the first
#                  Debian archive in this machine's apt sources)
#
# Inside, the command runs as root in /repo, the checkout (as it is on disk,
# uncommitted changes included). By default /repo is an overlay whose writes
# are thrown away when the command ends: scripts/test.sh's build/ and pytest's
# caches never touch the checkout, so a run here and one on the machine can
# share it at the same time. VENV defaults to /root/venvs/<basename of
# $PYTHON>, inside the root, where pip's installs are kept from run to run
# and never meet the checkout's .venv* (made by other interpreters).
#
# The environment inside is a clean one (PATH, HOME, LANG, TERM, CI), plus
# what the project's scripts read: PYTHON, VENV, REDIS_PY, REDIS_BACKOFF_C_*,
# PYTEST_ADDOPTS, HYPOTHESIS_*, PIP_INDEX_URL, PIP_DEFAULT_TIMEOUT, the proxy
# variables. Anything else: `-- env NAME=VALUE COMMAND`.
#
# Needs root (debootstrap, mount, chroot) and unshare(1). Every mount is made
# in a private mount namespace (unshare --mount) that dies with the command:
# no mount is ever left on the machine, even when this script is killed, so
# `rm -rf` of the root can never reach the machine's /dev or /proc through
# one. debootstrap runs in such a namespace too, for the /proc, /sys and
# device binds it makes itself.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

say() { printf 'sid-root.sh: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}
usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
}

root=${REDIS_BACKOFF_C_SID_ROOT:-/var/cache/redis-backoff-c/sid-root}
rebuild=0
writable_repo=0
while [ $# -gt 0 ]; do
    case $1 in
        --root)
            [ $# -ge 2 ] || die "--root needs a directory"
            root=$2
            shift 2
            ;;
        --root=*)
            root=${1#--root=}
            shift
            ;;
        --rebuild)
            rebuild=1
            shift
            ;;
        --writable-repo)
            writable_repo=1
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        --)
            shift
            break
            ;;
        -*)
            usage
            die "unknown option: $1"
            ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || {
    usage
    die "no command given"
}

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, mount and chroot)"
command -v unshare >/dev/null 2>&1 || die "needs unshare(1) (Debian: util-linux)"
case $root in
    /*) ;;
    *) root=$(pwd)/$root ;;
esac
root=$(realpath -m "$root")
# The root is deleted whole when it is incomplete: never a directory that
# holds anything else.
case $root in
    / | /bin | /boot | /dev | /etc | /home | /lib* | /proc | /root | /run | /sbin | /sys | /tmp | /usr | /var | "$repo" | "$repo"/*)
        die "refusing $root as the root's directory: give --root a directory of its own"
        ;;
esac

# What the root holds. The recipe is written to the completion marker: a
# root made from another list is made anew. python3.14-dbg (python3.14d) is
# optional: the suite does not need it, and a sid whose debug build cannot be
# installed for a while should not stop the 3.14 and 3.15 runs.
suite=sid
packages=(python3.14 python3.14-dev python3.14-venv python3.15 python3.15-dev python3.15-venv
    gcc libc6-dev redis-server git ca-certificates)
optional=(python3.14-dbg)
recipe="suite=$suite variant=minbase packages=${packages[*]} optional=${optional[*]} layout=1"
stamp=.made-by-redis-backoff-c-sid-root # written first: this directory is ours
done_marker=.redis-backoff-c-sid-root-complete # written last: the root is whole
host_ca=/etc/ssl/certs/ca-certificates.crt
root_ca=/usr/local/share/redis-backoff-c/host-ca-certificates.crt

# The Debian archive this machine's apt uses (deb822 .sources, then one-line
# .list files): on machines that reach only their own mirror, that one is
# known to answer.
debian_mirror() {
    if [ -n "${SID_MIRROR:-}" ]; then
        printf '%s\n' "$SID_MIRROR"
        return
    fi
    local uri
    uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' \
        | grep -E '^https?://[^ ]*/debian/?$' | head -n 1 || true)
    if [ -z "$uri" ]; then
        uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | sed -n 's/\[[^]]*\]//; s/^deb[[:space:]]\{1,\}\([^[:space:]]*\).*/\1/p' \
            | grep -E '^https?://[^ ]*/debian/?$' | head -n 1 || true)
    fi
    [ -n "$uri" ] || die "no Debian archive in /etc/apt/sources*: set SID_MIRROR to one"
    printf '%s\n' "${uri%/}"
}

# Anything mounted at or under the root in this (the machine's) namespace.
# This script never leaves one; a hand-made one would make `rm -rf` of the
# root reach whatever it shows, so the root is then never deleted.
mounts_under_root() {
    awk -v r="$root" '{ p = $5; gsub(/\\040/, " ", p) } p == r || index(p, r "/") == 1 { print p }' \
        /proc/self/mountinfo
}

remove_root() {
    local left
    left=$(mounts_under_root)
    if [ -n "$left" ]; then
        say "mounted under $root (unmount them, then run this again):"
        printf '  %s\n' "$left" >&2
        exit 1
    fi
    # --one-file-system: a second guard, should a mount appear in between.
    rm -rf --one-file-system "$root"
}

# debootstrap, in a mount namespace of its own; its output goes to a file,
# shown when it fails.
run_debootstrap() {
    local include=$1 mirror=$2 log
    log=$(mktemp)
    if unshare --mount --propagation private \
        debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" >"$log" 2>&1; then
        rm -f "$log"
        return 0
    fi
    say "debootstrap failed; its last lines:"
    tail -n 25 "$log" >&2
    [ ! -f "$root/debootstrap/debootstrap.log" ] || tail -n 15 "$root/debootstrap/debootstrap.log" >&2
    rm -f "$log"
    return 1
}

fresh_root_dir() {
    [ ! -e "$root" ] || remove_root
    mkdir -p "$root"
    echo "made by redis-backoff-c's scripts/sid-root.sh; safe to delete" >"$root/$stamp"
}

make_root() {
    if [ -e "$root" ] && [ ! -e "$root/$stamp" ] && [ -n "$(ls -A "$root")" ]; then
        die "$root exists and was not made by this script: remove it, or give --root another directory"
    fi
    if ! command -v debootstrap >/dev/null 2>&1; then
        say "installing debootstrap with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq debootstrap >/dev/null
    fi
    local mirror all
    mirror=$(debian_mirror)
    all=$(
        IFS=,
        echo "${packages[*]},${optional[*]}"
    )
    say "making the $suite root in $root from $mirror (debootstrap, about 90 s)"
    fresh_root_dir
    if ! run_debootstrap "$all" "$mirror"; then
        say "again without ${optional[*]}, to be installed afterwards"
        fresh_root_dir
        run_debootstrap "$(
            IFS=,
            echo "${packages[*]}"
        )" "$mirror" || die "debootstrap failed: no $suite root"
    fi

    # apt in the root: sid's Release files carry a Valid-Until that a machine
    # clock ahead of the archive's (or a mirror that lags) reads as expired;
    # the signature is still checked.
    cat >"$root/etc/apt/apt.conf.d/99redis-backoff-c" <<'EOF'
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
EOF
    # /dev/ptmx as devpts' own (the namespace mounts a new devpts instance):
    # debootstrap's device node would open the machine's instance instead.
    rm -f "$root/dev/ptmx"
    ln -s pts/ptmx "$root/dev/ptmx"
    mkdir -p "$root/repo" "$root/root/venvs" "$root/var/lib/redis-backoff-c/overlay" \
        "$(dirname "$root$root_ca")"

    copy_host_files
    say "apt-get update in the root"
    in_root apt-get update -qq || die "apt-get update failed in the root"
    local pkg
    for pkg in "${optional[@]}"; do
        if ! in_root dpkg -s "$pkg" >/dev/null 2>&1; then
            in_root apt-get install -y -qq "$pkg" >/dev/null \
                || say "warning: $pkg could not be installed in the root; going on without it"
        fi
    done
    # shellcheck disable=SC2016 # expanded by the shell inside the root
    in_root sh -c 'for p in python3.14 python3.15 python3.14d gcc redis-server; do
        command -v "$p" >/dev/null && printf "  %-13s %s\n" "$p" "$("$p" --version 2>&1 | head -n 1)"; done' >&2
    printf '%s\n' "$recipe" >"$root/$done_marker"
    say "the root is ready"
}

# Files of the machine's that the root needs at every run, copied fresh
# (they change): DNS, and the CA bundle, which on these machines has the
# certificate of the TLS proxy on the way to PyPI, which sid's own bundle
# lacks. rm first: a symlink left in the root must not be followed out of it.
copy_host_files() {
    rm -f "$root/etc/resolv.conf"
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    rm -f "$root$root_ca"
    [ ! -f "$host_ca" ] || cp -L "$host_ca" "$root$root_ca"
}

# The environment inside: a clean one, with what the project's scripts read.
inner_env() {
    local name
    env_args=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
        LANG=C.UTF-8 TERM="${TERM:-dumb}" DEBIAN_FRONTEND=noninteractive)
    if [ -f "$root$root_ca" ]; then
        env_args+=(PIP_CERT="$root_ca" SSL_CERT_FILE="$root_ca" REQUESTS_CA_BUNDLE="$root_ca")
    fi
    for name in $(compgen -e); do
        case $name in
            CI | PYTHON | VENV | REDIS_PY | REDIS_BACKOFF_C_* | PYTEST_ADDOPTS | HYPOTHESIS_* | \
                PIP_INDEX_URL | PIP_DEFAULT_TIMEOUT | PIP_DISABLE_PIP_VERSION_CHECK | \
                http_proxy | https_proxy | no_proxy | HTTP_PROXY | HTTPS_PROXY | NO_PROXY)
                env_args+=("$name=${!name}")
                ;;
        esac
    done
    if [ -z "${VENV:-}" ]; then
        env_args+=("VENV=/root/venvs/$(basename "${PYTHON:-python3}")")
    fi
}

# Runs in the new mount namespace (bash -c, from in_root): the mounts, then
# chroot. Every mount here dies with the namespace.
namespace_main() {
    local root=$1 repo=$2 writable_repo=$3 overlay_dir=$4 dev
    shift 4
    mount -t proc proc "$root/proc"
    # /dev: a tmpfs with the machine's device nodes bound onto files in it,
    # rather than debootstrap's nodes (in a container, debootstrap may have
    # made empty files instead), and a devpts and /dev/shm of its own.
    mount -t tmpfs -o mode=0755,nosuid tmpfs "$root/dev"
    for dev in null zero full random urandom tty; do
        touch "$root/dev/$dev"
        mount --bind "/dev/$dev" "$root/dev/$dev"
    done
    mkdir -p "$root/dev/pts" "$root/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
    ln -s pts/ptmx "$root/dev/ptmx"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
    ln -s /proc/self/fd "$root/dev/fd"
    ln -s /proc/self/fd/0 "$root/dev/stdin"
    ln -s /proc/self/fd/1 "$root/dev/stdout"
    ln -s /proc/self/fd/2 "$root/dev/stderr"
    if [ -n "$repo" ]; then
        local bound=0
        if [ "$writable_repo" = 0 ]; then
            # upper and work dirs on a tmpfs: the writes go when the namespace does.
            mount -t tmpfs -o mode=0700 tmpfs "$root$overlay_dir"
            mkdir -p "$root$overlay_dir/upper" "$root$overlay_dir/work"
            if mount -t overlay overlay \
                -o "lowerdir=$repo,upperdir=$root$overlay_dir/upper,workdir=$root$overlay_dir/work" \
                "$root/repo" 2>/dev/null; then
                bound=1
            else
                printf 'sid-root.sh: %s\n' "no overlay mount here: /repo is the checkout itself (--writable-repo)" >&2
            fi
        fi
        [ "$bound" = 1 ] || mount --bind "$repo" "$root/repo"
    fi
    exec chroot "$root" "$@"
}

# in_root COMMAND...: COMMAND in the root, in /repo when the checkout is
# there (only for the user's command, not during setup).
in_root() {
    inner_env
    # shellcheck disable=SC2016 # expanded by the shell inside the root
    unshare --mount --propagation private bash -c "$(declare -f namespace_main); namespace_main \"\$@\"" \
        bash "$root" "${bind_repo:-}" "$writable_repo" /var/lib/redis-backoff-c/overlay \
        /usr/bin/env -i "${env_args[@]}" /bin/sh -c 'cd "${1}" && shift && exec "$@"' sh \
        "${workdir:-/}" "$@"
}

# Made, or checked, under an exclusive lock (two runs at once do not both
# debootstrap, and none deletes a root that another is using); then the lock
# is held shared while the command runs, by this script alone: the command
# does not inherit it, so a daemon it leaves behind cannot hold it for ever.
mkdir -p "$(dirname "$root")"
exec {lock}>"$root.lock"
flock -x -w 1800 "$lock" || die "another sid-root.sh has held $root.lock for 30 minutes"
if [ "$rebuild" = 1 ] || [ ! -f "$root/$done_marker" ] || [ "$(cat "$root/$done_marker")" != "$recipe" ]; then
    make_root
fi
flock -s "$lock"

copy_host_files
bind_repo=$repo
workdir=/repo
in_root "$@" {lock}>&-
