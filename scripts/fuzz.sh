#!/usr/bin/env bash
# Runs every Go fuzz target (func FuzzX(f *testing.F) in a *_test.go file)
# for FUZZTIME each, one at a time: `go test -fuzz` takes one target per run.
#
#   scripts/fuzz.sh                  # all targets, FUZZTIME (default 30s) each
#   scripts/fuzz.sh Profile Rate     # only targets whose name matches a word
#   FUZZTIME=5m FUZZPARALLEL=1 scripts/fuzz.sh FuzzParseHost
#
# A failing input is written by Go to PKG/testdata/fuzz/FuzzX/ID: commit it
# with the fix, and it runs in every plain `go test` from then on.
set -uo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-30s}
parallel=()
[[ -n "${FUZZPARALLEL:-}" ]] && parallel=(-parallel "$FUZZPARALLEL")

# "dir target" per line, from the sources: no build of every package needed.
# Files with build constraints (vmtest) are skipped: those need the VM.
targets=$(git ls-files --cached --others --exclude-standard '*_test.go' | while read -r f; do
	grep -q '^//go:build' "$f" && continue
	sed -nE 's/^func (Fuzz[A-Za-z0-9_]+)\(f \*testing\.F\).*/\1/p' "$f" | sed "s|^|./$(dirname "$f") |"
done | sort -u)

if (($#)); then
	targets=$(grep -E "$(IFS='|'; echo "$*")" <<<"$targets")
fi
[[ -n "$targets" ]] || { echo "no fuzz target matches: $*" >&2; exit 2; }

n=$(wc -l <<<"$targets")
echo "fuzzing $n target(s) for $fuzztime each"
failed=()
while read -r dir target; do
	echo "== $target ($dir)"
	start=$SECONDS
	if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "${parallel[@]}" "$dir" 2>&1 | tail -n 25; then
		echo "   $target: ok after $((SECONDS - start)) s"
	else
		echo "   $target: FAILED after $((SECONDS - start)) s (the failing input is under $dir/testdata/fuzz/$target/)"
		failed+=("$target")
	fi
done <<<"$targets"

if ((${#failed[@]})); then
	echo "failed: ${failed[*]}" >&2
	exit 1
fi
echo "all $n fuzz targets ran $fuzztime without a failure"
