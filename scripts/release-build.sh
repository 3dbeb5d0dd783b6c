#!/usr/bin/env bash
# Builds the release artefacts of the dlock CLI from the committed HEAD:
#
#   scripts/release-build.sh [--snapshot] [OUTDIR]
#
# For linux and darwin on amd64 and arm64 it writes
# OUTDIR/dlock_VERSION_OS_ARCH.tar.gz (the stripped binary, LICENSE,
# README.md and CHANGELOG.md) and OUTDIR/SHA256SUMS (default OUTDIR: dist).
# VERSION is the tag at HEAD (vX.Y.Z); without one the build fails unless
# --snapshot is given, and then it is Go's pseudo-version of HEAD.
#
# The artefacts are reproducible: the same commit gives the same bytes on any
# machine with the same Go release (no cgo, -trimpath, no build ID, file
# times and owners in the archives taken from the commit).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

snapshot=
if [[ ${1:-} == --snapshot ]]; then
	snapshot=1
	shift
fi
out=${1:-dist}

if [[ -n $(git status --porcelain --untracked-files=no) ]]; then
	echo "release-build: the work tree has uncommitted changes; commit them first" >&2
	exit 1
fi
version=$(git describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null || true)
if [[ -z $version ]]; then
	if [[ -z $snapshot ]]; then
		echo "release-build: HEAD has no vX.Y.Z tag; tag it or pass --snapshot" >&2
		exit 1
	fi
	# Go's pseudo-version for a commit after v0.0.0, as go install reports it.
	version=v0.0.0-$(TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=%cd HEAD)-$(git rev-parse --short=12 HEAD)
fi
epoch=$(git log -1 --format=%ct HEAD)
echo "release-build: dlock $version"

rm -rf "$out"
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for target in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64; do
	os=${target%/*} arch=${target#*/}
	name=dlock_${version#v}_${os}_${arch}
	mkdir -p "$stage/$name"
	GOWORK=off CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false \
		-ldflags "-s -w -buildid= -X github.com/dlockhq/dlock/cmd/dlock/internal/cli.releaseVersion=$version" \
		-o "$stage/$name/dlock" ./cmd/dlock
	cp LICENSE README.md CHANGELOG.md "$stage/$name/"
	touch -d "@$epoch" "$stage/$name" "$stage/$name"/*
	tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" |
		gzip -n -9 >"$out/$name.tar.gz"
	echo "release-build: $out/$name.tar.gz ($(du -k "$stage/$name/dlock" | cut -f1) KiB binary)"
done
(cd "$out" && sha256sum -- *.tar.gz >SHA256SUMS)
cat "$out/SHA256SUMS"
