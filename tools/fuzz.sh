#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME each (default 5s).
# Targets are found by grepping the _test.go files, so new ones join by
# themselves. Go allows one -fuzz target per invocation; a failing input is
# written to the package's testdata/fuzz/<Target>/ and fails the run.
# FUZZPARALLEL, when set, bounds the fuzzing workers per target.
set -u
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-5s}
par=()
[ -n "${FUZZPARALLEL:-}" ] && par=(-parallel="$FUZZPARALLEL")
failed=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Go's fuzzing coordinator (before Go 1.27, golang/go#75804) can end a
# clean run with a bare "context deadline exceeded" when -fuzztime expires
# while a worker is busy: no failing input is written and nothing failed.
# Such a run is tried again, at most twice; any other failure counts.
fuzz_one() {
	local name=$1 pkg=$2 try rc
	for try in 1 2 3; do
		"$GO" test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "${par[@]}" "$pkg" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		[ "$rc" -eq 0 ] && return 0
		if ! grep -q '^    context deadline exceeded$' "$log" ||
			grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$log"; then
			return "$rc"
		fi
		echo "fuzz: $name stopped on Go's fuzztime deadline race without a failing input (try $try)"
	done
	return 1
}
n=0
start=$(date +%s)
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	n=$((n + 1))
	echo "fuzz: $name in $pkg for $FUZZTIME"
	t0=$(date +%s)
	if ! fuzz_one "$name" "$pkg"; then
		failed+=("$name ($pkg)")
	fi
	echo "fuzz: $name took $(($(date +%s) - t0))s"
done < <(git ls-files --cached --others --exclude-standard '*_test.go' | xargs grep -oE '^func Fuzz[A-Za-z0-9_]*\(' /dev/null |
	sed -E 's/^(.*):func (Fuzz[A-Za-z0-9_]*)\($/\1:\2/' | sort)
echo "fuzz: $n targets in $(($(date +%s) - start))s"
if [ "$n" -eq 0 ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz: FAILED: %s\n' "${failed[@]}" >&2
	exit 1
fi
