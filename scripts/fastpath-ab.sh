#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fastpath-ab.sh: `sluice bench fastpath` of two binaries in one run,
# alternating (the order reversed every other round), medians per case.
# The machine's speed drifts more between two runs minutes apart than the
# difference measured, so only rounds of the same session compare.
#
#   scripts/fastpath-ab.sh ROUNDS TUNNELS BEFORE AFTER [extra bench flags]
#   e.g. scripts/fastpath-ab.sh 4 1,65536 /tmp/sluice.before bin/sluice
#
# PEER=OBJ also measures that XDP object (`bench fastpath --peer`, an object
# built from fastSwan's src/bpf/xfrm_offload.c, not part of this
# repository) in AFTER's runs: a peer column, same rounds.
#
# Build BEFORE from git: git archive COMMIT | tar -x -C DIR; (cd DIR && go build -o BEFORE ./cmd/sluice)
set -euo pipefail
rounds=$1 tunnels=$2 a=$3 b=$4
shift 4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$rounds"); do
	order=("$a" "$b")
	((r % 2 == 0)) && order=("$b" "$a")
	for bin in "${order[@]}"; do
		label=after peer=()
		[[ $bin == "$a" ]] && label=before
		[[ $label == after && -n ${PEER:-} ]] && peer=(--peer "$PEER")
		"$bin" bench fastpath --tunnels "$tunnels" --repeat 200000 --json "${peer[@]}" "$@" |
			python3 -c 'import json,sys
for x in json.load(sys.stdin):
    b = "peer" if x.get("program") == "peer" else sys.argv[1]
    print(json.dumps({"bin": b, "t": x["tunnels"], "case": x["case"], "ns": x["ns_per_packet"], "reason": x["reason"] or x["action"]}))' "$label" >>"$out"
	done
done
python3 - "$out" <<'PY'
import collections, json, statistics, sys
d = collections.defaultdict(list); why = {}
for line in open(sys.argv[1]):
    x = json.loads(line); k = (x["case"], x["t"], x["bin"]); d[k].append(x["ns"]); why[k] = x["reason"]
print("| case | tunnels | before (median, runs) | after (median, runs) | peer (median, runs) |")
print("|---|---:|---:|---:|---:|")
for case, t in sorted({(k[0], k[1]) for k in d}, key=lambda k: (k[0], k[1])):
    cell = lambda b: "%.0f ns (%s) %s" % (statistics.median(d[(case, t, b)]), ", ".join("%.0f" % v for v in d[(case, t, b)]), why[(case, t, b)]) if (case, t, b) in d else "-"
    print(f"| {case} | {t} | {cell('before')} | {cell('after')} | {cell('peer')} |")
PY
