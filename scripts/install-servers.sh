#!/usr/bin/env bash
# Installs the database servers the tests start (see internal/testing/testsrv:
# PostgreSQL with PgBouncer, MariaDB, Redis — redis-server also runs the sentinel, with
# --sentinel —, memcached, etcd and ZooKeeper), and the foreign lock clients
# the interop tests run against them (Apache Curator with a JDK to compile
# its test program, kazoo, etcdctl), if their programs are missing; and
# nats-server, built from its Go module at NATS_SERVER_VERSION into
# /usr/local/bin (Debian's is older than 2.11, which brought the per-message
# TTL that natsdlock's leases need).
# Idempotent: does nothing when all are present.
# Debian/Ubuntu only (apt-get). Runs apt through sudo when not root.
#
# System services are not started: a policy-rc.d that forbids service starts
# is put in place for the duration of the install (unless one exists already).
set -euo pipefail

# program (or file)    package          directories searched besides PATH
REQUIRED=(
	"initdb              postgresql       /usr/lib/postgresql/*/bin /usr/pgsql-*/bin"
	"postgres            postgresql       /usr/lib/postgresql/*/bin /usr/pgsql-*/bin"
	"pgbouncer           pgbouncer        /usr/sbin"
	"mariadbd            mariadb-server   /usr/sbin"
	"mariadb-install-db  mariadb-server   /usr/bin"
	"redis-server        redis-server     /usr/bin /usr/local/bin /usr/sbin"
	"memcached           memcached        /usr/bin /usr/local/bin /usr/sbin"
	"etcd                etcd-server      /usr/bin /usr/local/bin"
	"zkServer.sh         zookeeper        /usr/share/zookeeper/bin"
	"javac               default-jdk-headless     /usr/lib/jvm/default-java/bin"
	"curator-recipes.jar libcurator-recipes-java  /usr/share/java"
	"kazoo/__init__.py   python3-kazoo            /usr/lib/python3/dist-packages"
	"etcdctl             etcd-client      /usr/bin /usr/local/bin"
)

# have PROGRAM DIR... : is PROGRAM an executable file in PATH or in one of
# DIRs (globs, expanded by the caller)? A jar or a path with a slash (a
# Python module) need only be a file, in one of DIRs. (Not `command -v`:
# bash reports a non-executable file when it finds no executable one.)
have() {
	local prog=$1 dir path_dirs
	shift
	if [[ $prog == *.jar || $prog == */* ]]; then
		for dir in "$@"; do
			[[ -f $dir/$prog ]] && return 0
		done
		return 1
	fi
	IFS=: read -ra path_dirs <<<"${PATH:-}"
	for dir in "${path_dirs[@]}" "$@"; do
		[[ -n $dir && -f $dir/$prog && -x $dir/$prog ]] && return 0
	done
	return 1
}

# missing_packages: prints the packages of missing programs, one per line, deduplicated.
missing_packages() {
	local entry prog pkg dirs
	for entry in "${REQUIRED[@]}"; do
		read -r prog pkg dirs <<<"$entry"
		# shellcheck disable=SC2086 # $dirs holds globs to expand
		have "$prog" $dirs || echo "$pkg"
	done | awk '!seen[$0]++'
}

# nats-server is built with the Go toolchain, not installed from a package.
NATS_SERVER_VERSION=v2.15.2
NATS_BIN=/usr/local/bin
if ! have nats-server "$NATS_BIN"; then
	if ! command -v go >/dev/null 2>&1; then
		echo "install-servers: nats-server missing and no Go toolchain to build it; install Go, or nats-server $NATS_SERVER_VERSION" >&2
		exit 1
	fi
	gobuild=(env GOBIN="$NATS_BIN" "$(command -v go)" install "github.com/nats-io/nats-server/v2@$NATS_SERVER_VERSION")
	if [[ ! -w $NATS_BIN ]]; then
		gobuild=(sudo "${gobuild[@]}")
	fi
	"${gobuild[@]}" >&2
	echo "install-servers: built nats-server $NATS_SERVER_VERSION into $NATS_BIN"
fi

mapfile -t missing < <(missing_packages)
if ((${#missing[@]} == 0)); then
	echo "install-servers: nothing to install; all database servers and clients present"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "install-servers: missing packages: ${missing[*]}" >&2
	echo "install-servers: apt-get not found; install the equivalent packages with your package manager" >&2
	exit 1
fi

SUDO=()
if ((EUID != 0)); then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	else
		echo "install-servers: missing packages: ${missing[*]}" >&2
		echo "install-servers: not root and no sudo; run as root:" >&2
		echo "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}" >&2
		exit 1
	fi
fi

# Forbid service starts during the install, so apt leaves no system
# postgres/mariadb/redis/memcached/etcd/zookeeper running. Only ours is
# removed afterwards.
POLICY=/usr/sbin/policy-rc.d
created_policy=
cleanup() {
	if [[ -n $created_policy ]]; then
		"${SUDO[@]}" rm -f "$POLICY"
	fi
}
trap cleanup EXIT
if [[ ! -e $POLICY ]]; then
	printf '#!/bin/sh\n# created by install-servers.sh for the duration of an install\nexit 101\n' |
		"${SUDO[@]}" tee "$POLICY" >/dev/null
	created_policy=1
	"${SUDO[@]}" chmod 755 "$POLICY"
fi

APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q)
"${APT[@]}" update >&2
"${APT[@]}" install -y --no-install-recommends "${missing[@]}" >&2

mapfile -t still < <(missing_packages)
if ((${#still[@]} != 0)); then
	echo "install-servers: installed ${missing[*]} but programs are still missing from: ${still[*]}" >&2
	exit 1
fi
echo "install-servers: installed ${missing[*]}"
