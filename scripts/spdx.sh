#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Gives every source file the SPDX line its path calls for (README "License"):
#   bpf/                    (GPL-2.0-only OR BSD-2-Clause)  the BPF programs: GPL-compatible
#                           for the kernel's GPL-only helpers (bpf_fib_lookup), BSD so the
#                           objects can be embedded in the Apache-2.0 binary
#   kmod/ (not *.go)        GPL-2.0-only                    the NIC model kernel module
#   everything else         Apache-2.0
# Source files: *.go *.c *.h *.sh *.py *.yaml *.yml *.service *.mk Makefile Kbuild and scripts
# with a shebang, tracked or new (not ignored). Skipped: testdata/ (inputs, byte for byte) and
# generated Go ("Code generated ... DO NOT EDIT."): bpf2go rewrites *_bpfel.go on every
# `make generate`, so their C sources carry the line and internal/guard checks that each
# object's license section agrees with its C source.
#
# Idempotent: a file that already has an SPDX line in its first lines is left alone.
#   scripts/spdx.sh          add missing lines, print the files it changed
#   scripts/spdx.sh --check  change nothing; list files without a line, or with the wrong
#                            one for their path, and exit 1 if there are any
# SPDX_ROOT=dir runs on another tree (the guard test uses it to prove --check can fail).
set -euo pipefail

check=0
[ "${1:-}" = --check ] && check=1
root=${SPDX_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

bpf_lic='(GPL-2.0-only OR BSD-2-Clause)'

# license PATH: the identifier PATH must carry.
license() {
	case $1 in
	bpf/*) echo "$bpf_lic" ;;
	kmod/*.go) echo Apache-2.0 ;; # kmod.go only embeds the sources as data
	kmod/*) echo GPL-2.0-only ;;
	*) echo Apache-2.0 ;;
	esac
}

# accepted PATH ID: the kernel's own spelling GPL-2.0 is GPL-2.0-only (SPDX deprecated it, and
# checkpatch accepts both), so a kernel-style kmod line need not be rewritten.
accepted() {
	local want
	want=$(license "$1")
	[ "$2" = "$want" ] && return 0
	[ "$want" = GPL-2.0-only ] && [ "$2" = GPL-2.0 ] && return 0
	[ "$want" = "$bpf_lic" ] && [ "$2" = "(GPL-2.0 OR BSD-2-Clause)" ] && return 0
	return 1
}

# style PATH: sets st to how the line is written ("" = not a source file). No subshells:
# the loop runs over every file in the tree.
style() {
	st=
	case $1 in
	*/testdata/* | testdata/*) ;;
	*.go) st=go ;;
	*.c) st=slashes ;;
	*.h) st=block ;;
	*.sh | *.py | *.yaml | *.yml | *.service | *.mk | Makefile | */Makefile | Kbuild | */Kbuild) st=hash ;;
	*.* | */*.*) ;;
	*)
		# extensionless scripts (.ci/run): a shebang makes them source
		local first
		IFS= read -r first <"$1" || true
		[[ $first == '#!'* ]] && st=hash
		;;
	esac
	return 0
}

# spdx_of PATH: sets have to the identifier in the file's first 5 lines, "" when none.
spdx_of() {
	have=
	local line n=0
	while [ $n -lt 5 ] && IFS= read -r line; do
		n=$((n + 1))
		[[ $line == *SPDX-License-Identifier:* ]] || continue
		have=${line#*SPDX-License-Identifier:}
		have=${have# }
		have=${have% \*/}
		have=${have%"${have##*[![:space:]]}"}
		return 0
	done <"$1"
}

# go_spdx_apart PATH: a Go file whose SPDX line is not line 1, or is followed by a blank line.
go_spdx_apart() {
	local first second
	{ IFS= read -r first; IFS= read -r second; } <"$1" || true
	[[ $first != *SPDX-License-Identifier* ]] || [ -z "$second" ]
}

# generated PATH: Go written by a generator (bpf2go), which says so in its first lines.
generated() {
	local line n=0
	while [ $n -lt 5 ] && IFS= read -r line; do
		n=$((n + 1))
		[[ $line == '// Code generated '*' DO NOT EDIT.' ]] && return 0
	done <"$1"
	return 1
}

add() {
	local f=$1 st=$2 id=$3 tmp
	tmp=$(mktemp)
	case $st in
	go) { printf '// SPDX-License-Identifier: %s\n\n' "$id"; cat "$f"; } >"$tmp" ;; # the blank line keeps it out of the package doc
	slashes) { printf '// SPDX-License-Identifier: %s\n' "$id"; cat "$f"; } >"$tmp" ;;
	block) { printf '/* SPDX-License-Identifier: %s */\n' "$id"; cat "$f"; } >"$tmp" ;;
	hash)
		if head -c2 "$f" | grep -q '^#!'; then
			{ head -n 1 "$f"; printf '# SPDX-License-Identifier: %s\n' "$id"; tail -n +2 "$f"; } >"$tmp"
		else
			{ printf '# SPDX-License-Identifier: %s\n' "$id"; cat "$f"; } >"$tmp"
		fi
		;;
	esac
	cat "$tmp" >"$f" # keeps the file's mode
	rm -f "$tmp"
}

files() {
	if git rev-parse --git-dir >/dev/null 2>&1; then
		git ls-files -z --cached --others --exclude-standard
	else
		find . -type f -not -path './.git/*' -printf '%P\0'
	fi
}

bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue # deleted in the work tree
	style "$f"
	[ -n "$st" ] || continue
	[ "$st" = go ] && generated "$f" && continue
	spdx_of "$f"
	if [ -n "$have" ]; then
		if ! accepted "$f" "$have"; then
			echo "$f: SPDX-License-Identifier is '$have', its path needs '$(license "$f")' (see README, License)"
			bad=1
		elif [ "$st" = go ] && ! go_spdx_apart "$f"; then
			# without a blank line the SPDX line becomes the first line of the package doc
			if [ $check = 1 ]; then
				echo "$f: the SPDX line needs a blank line after it (it joins the package doc): run scripts/spdx.sh"
				bad=1
			else
				sed -i '1{/SPDX-License-Identifier/{n;/^$/!i\

}}' "$f"
				echo "blank line after the SPDX line: $f"
			fi
		fi
		continue
	fi
	if [ $check = 1 ]; then
		echo "$f: no SPDX-License-Identifier line: run scripts/spdx.sh"
		bad=1
	else
		add "$f" "$st" "$(license "$f")"
		echo "added $(license "$f"): $f"
	fi
done < <(files)
exit $bad
