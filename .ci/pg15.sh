#!/usr/bin/env bash
# PostgreSQL 15 for the test suite: Debian's postgresql-15 and its server
# headers (apt), and pgvector built from the vendored source with that
# pg_config. The build is cached outside the repository, keyed by the
# pgvector and PostgreSQL versions, so a second run only copies files.
#   usage: .ci/pg15.sh VENDOR_DIR CACHE_DIR     (prints nothing on success but one line)
set -euo pipefail
vendor=$1
cache=$2
pgvector_version=0.8.6
pgvector_sha256=5743dac39fdfa740533cf95e71b033bd5513b71dda194b3cf19464ccbf76f3fb
pg_config=/usr/lib/postgresql/15/bin/pg_config

installed=$(dpkg-query -W -f='${db:Status-Status}\n' postgresql-15 postgresql-server-dev-15 2>/dev/null \
    | grep -c '^installed$' || true)
if [ "$installed" != 2 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        postgresql-15 postgresql-server-dev-15 >/dev/null
fi

pg_version=$($pg_config --version | awk '{print $2}')
stage="$cache/pgvector-$pgvector_version-pg$pg_version"
if [ ! -f "$stage/.complete" ]; then
    tarball="$vendor/pgvector-$pgvector_version.tar.gz"
    echo "$pgvector_sha256  $tarball" | sha256sum --check --quiet
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    tar -xzf "$tarball" -C "$build"
    # OPTFLAGS empty: no -march=native, so the cached build runs on any x86-64.
    make -s -C "$build/pgvector-$pgvector_version" PG_CONFIG="$pg_config" OPTFLAGS="" -j2 >/dev/null
    rm -rf "$stage"
    make -s -C "$build/pgvector-$pgvector_version" PG_CONFIG="$pg_config" OPTFLAGS="" \
        DESTDIR="$stage/root" install >/dev/null
    touch "$stage/.complete"
fi
# Installing is copying the staged files over /; cheap and idempotent.
cp -r "$stage/root/." /
echo "PostgreSQL $pg_version with pgvector $pgvector_version from $stage"
