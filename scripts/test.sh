#!/usr/bin/env bash
# The project's test command: installs the database servers the tests need,
# then vets and runs all tests with the race detector. Extra arguments are
# passed to go test (e.g. scripts/test.sh -run TestLock -v).
#
# With CI set (non-empty), tests that need a database server fail instead of
# being skipped when it cannot be started.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CI="${CI:-}"
# The library alone, with the versions its go.mod names (not the workspace's,
# which the adapters and bench may raise): what a consumer's build sees.
export GOWORK=off

scripts/install-servers.sh
go mod download
go vet ./...
go test -race -count=1 -timeout 20m ./... "$@"
