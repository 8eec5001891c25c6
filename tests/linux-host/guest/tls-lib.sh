#!/bin/bash
# tls-lib.sh -- NVMe/TCP over TLS in the guest (an image made with
# run-linux-host --tls; the 6.12 kernel): kTLS and its ciphers, the .nvme
# keyring, tlshd (ktls-utils 1.0) and nvme-cli 2.13 (`nvme-tls`). Sourced
# by kernel-target-serve.sh (SERVE_TLS=1) and tls-host.sh, which define
# die() or fail() first; passed with `run-linux-host -f`.

tls_die() {
	if declare -F die >/dev/null; then die "$@"; else fail "$@"; fi
}

# tls_start: the modules, then tlshd with the .nvme keyring, its log
# (each handshake's identity and result) copied to stderr. tlshd 1.0 is
# ready once it has printed its last priority string (after linking the
# keyring, before it listens for handshake requests).
tls_start() {
	local m i=0
	command -v tlshd >/dev/null || tls_die "no tlshd: an image made with run-linux-host --tls is needed"
	for m in aesni_intel gcm ghash_generic ccm tls nvme-keyring; do
		modprobe "$m" 2>/dev/null || grep -q "/${m//-/_}.ko" <(tr - _ </lib/modules/"$(uname -r)"/modules.builtin) ||
			tls_die "cannot load kernel module $m"
	done
	grep -q '\.nvme' /proc/keys || tls_die "no .nvme keyring (nvme-keyring)"
	cat >/etc/tlshd.conf <<-CONF
		[debug]
		loglevel=6
		tls=0
		nl=0
		[authenticate]
		keyrings=.nvme
		[authenticate.client]
		[authenticate.server]
	CONF
	tlshd -c /etc/tlshd.conf -s >/run/tlshd.log 2>&1 &
	TLSHD_PID=$!
	while ! grep -q "PSK SHA384 priority string" /run/tlshd.log 2>/dev/null; do
		i=$((i + 1))
		[[ $i -lt 300 ]] || tls_die "tlshd did not start: $(cat /run/tlshd.log)"
		kill -0 "$TLSHD_PID" 2>/dev/null || tls_die "tlshd exited: $(cat /run/tlshd.log)"
		sleep 0.1
	done
	tail -n +1 -f /run/tlshd.log | while IFS= read -r l; do echo "[guest] $l"; done >&2 &
	# shellcheck disable=SC2034  # (for the scripts that source this)
	TLSHD_TAIL=$!
}

# tls_insert KEY HOSTNQN SUBNQN VERSION: nvme-cli 2.13's check-tls-key
# --insert (its derivation: libnvme 1.13's) puts the TLS PSK of that
# identity into .nvme; prints the key's serial (hex).
tls_insert() {
	local out
	out=$(nvme-tls check-tls-key --keydata="$1" --hostnqn="$2" --subsysnqn="$3" --identity="$4" --insert) ||
		tls_die "nvme check-tls-key --insert failed for $2 $3 identity $4"
	[[ $out =~ Inserted\ TLS\ key\ ([0-9a-f]+) ]] || tls_die "nvme check-tls-key printed '$out'"
	echo "${BASH_REMATCH[1]}"
}
