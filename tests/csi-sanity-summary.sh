#!/usr/bin/env bash
# tests/csi-sanity-summary.sh LOG -- what a csi-sanity run (ginkgo -v
# output in LOG) did: specs run, passed, failed, skipped, and why each
# skipped spec was skipped. A skip is accepted only when csi-sanity skipped
# it because the driver does not advertise the capability it tests (its
# reason is "... not supported"), or because of what NodeGetInfo
# advertises (max_volumes_per_node 0: no attach limit, "No
# MaxVolumesPerNode"), or it is a Node Service spec, which
# tests/csi-sanity.sh leaves to the VM (--ginkgo.skip 'Node Service').
# Anything else skipped (a test configuration left out) fails the summary,
# as does a missing summary.
set -euo pipefail
log=${1:?usage: csi-sanity-summary.sh LOG}

ran=$(grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$log" | tail -n1 || true)
counts=$(grep -E '[0-9]+ Passed \| [0-9]+ Failed' "$log" | tail -n1 || true)
if [[ -z $ran || -z $counts ]]; then
	echo "csi-sanity: no summary in $log (did it run?)" >&2
	exit 1
fi
num() { sed -n "s/.*[^0-9]\\([0-9][0-9]*\\) $1.*/\\1/p" <<<"$counts"; }
passed=$(num Passed)
failed=$(num Failed)
skipped=$(num Skipped)
pending=$(num Pending)
total=$(sed -n 's/^Ran [0-9]* of \([0-9]*\) Specs.*/\1/p' <<<"$ran")
echo "---- csi-sanity: $ran"
echo "specs: $total; passed: $passed; failed: $failed; skipped: $skipped; pending (marked so in csi-sanity itself): ${pending:-0}"

# ginkgo -v prints each skipped spec's reason as an indented
# "[SKIPPED] <reason>" line, and its place as "[SKIPPED] in [It] - ..." (a
# spec excluded by --ginkgo.skip prints neither).
reasons=$(grep -E '^\s+\[SKIPPED\] ' "$log" | grep -vE '^\s+\[SKIPPED\] in \[' |
	sed -E 's/^\s+\[SKIPPED\] //' || true)
by_caps=0
bad=0
if [[ -n $reasons ]]; then
	echo "skipped by csi-sanity, with its reason:"
	while IFS= read -r line; do
		n=${line%% *}
		reason=${line#* }
		if [[ $reason =~ not\ supported$ ]]; then
			echo "  $n x $reason   (capability not advertised)"
			by_caps=$((by_caps + n))
		elif [[ $reason = "No MaxVolumesPerNode" ]]; then
			echo "  $n x $reason   (NodeGetInfo advertises no attach limit)"
			by_caps=$((by_caps + n))
		else
			echo "  $n x $reason   (NOT a capability the driver leaves out)"
			bad=$((bad + n))
		fi
	done < <(sort <<<"$reasons" | uniq -c | sed -E 's/^ *//')
fi
node=$((skipped - by_caps - bad))
echo "skipped for a capability (or attach limit) not advertised: $by_caps"
echo "not run here (Node Service specs, --ginkgo.skip; their run is in the VM): $node"
if ((bad > 0)); then
	echo "csi-sanity: $bad spec(s) skipped for another reason than a capability" >&2
	exit 1
fi
if ((failed > 0 || passed == 0)); then
	exit 1
fi
