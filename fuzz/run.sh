#!/bin/bash
# Runs the farflash fuzz targets (cargo-fuzz / libFuzzer) for a fixed time.
#
#   fuzz/run.sh [SECONDS] [TARGET...]     each target SECONDS (default 60)
#   fuzz/run.sh --repro TARGET FILE       re-run one input, with the backtrace
#   fuzz/run.sh --list                    the targets
#
# Exits non-zero as soon as a target crashes (panic, ASan report, leak,
# timeout, out-of-memory); the input is saved under fuzz/artifacts/TARGET/
# and the command to reproduce it is printed. New inputs found go to a
# scratch corpus (fuzz/target/corpus-work), never into the committed seeds.
#
# Environment:
#   SANITIZER=address|none   (default address; works on stable rustc through
#                            RUSTC_BOOTSTRAP=1, which cargo-fuzz's -Z flags need)
#   FUZZ_TOLERATE=a,b        known bugs to look past (see docs/fuzzing.md)
#   NICE=10                  niceness of the fuzzing processes
#   FUZZ_ARGS="..."          extra libFuzzer flags
# Needs cargo-fuzz: cargo install cargo-fuzz --locked
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export RUSTC_BOOTSTRAP=1
san=${SANITIZER:-address}
nice_lvl=${NICE:-10}
all=(pdu_framing command_decode command_layer target_connection host_connection auth_exchange rpc_request config_toml rdma_capsule iscsi_url rdma_host tls_key_format tls_record tls_key_file tls_record_scan pool_metadata)

max_len() {
    case $1 in
    pdu_framing) echo 2048 ;;
    command_decode) echo 4200 ;;
    auth_exchange) echo 4096 ;;
    tls_key_format) echo 1024 ;;
    tls_key_file) echo 4096 ;;
    tls_record) echo 16384 ;;
    tls_record_scan) echo 70000 ;;
    *) echo 65536 ;;
    esac
}

need_cargo_fuzz() {
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
        exit 2
    fi
}

if [ "${1:-}" = --list ]; then
    printf '%s\n' "${all[@]}"
    exit 0
fi

# cargo-fuzz's build, then the libFuzzer binaries run directly (one build
# for every target, and no rebuild between targets).
build() {
    need_cargo_fuzz
    echo "== building (sanitizer $san)"
    nice -n "$nice_lvl" cargo fuzz build -s "$san" "$@"
}
triple=$(rustc -vV | sed -n 's/^host: //p')
bin() { echo "$here/target/$triple/release/$1"; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0}

if [ "${1:-}" = --repro ]; then
    target=${2:?--repro TARGET FILE}
    file=${3:?--repro TARGET FILE}
    case $file in /*) ;; *) [ -e "$file" ] || file=$OLDPWD/$file ;; esac
    build "$target"
    echo "== $target on $file"
    RUST_BACKTRACE=1 "$(bin "$target")" "$file"
    exit $?
fi

secs=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
build

work=$here/target/corpus-work
mkdir -p "$work" "$here/artifacts"
summary=()
for t in "${targets[@]}"; do
    mkdir -p "$work/$t" "$here/corpus/$t" "$here/artifacts/$t"
    log=$work/$t.log
    echo "== $t for ${secs}s (log: $log)"
    set +e
    # shellcheck disable=SC2086
    nice -n "$nice_lvl" "$(bin "$t")" "$work/$t" "$here/corpus/$t" \
        -artifact_prefix="$here/artifacts/$t/" -max_total_time="$secs" \
        -max_len="$(max_len "$t")" -timeout=25 \
        -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1
    rc=$?
    set -e
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [ -n "$runs" ] || runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
        grep -E "panicked at|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)" "$log" | head -5 || true
        crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        echo "!! $t crashed after ${runs:-?} runs (exit $rc); input: ${crash:-see $log}"
        echo "   reproduce: fuzz/run.sh --repro $t ${crash#"$here"/}"
        echo "   minimize:  (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz tmin -s $san $t ${crash#"$here"/})"
        echo "| $(date -u +%F) | $t | $secs | ${runs:-?} | crash: ${crash##*/} |"
        exit 1
    fi
    summary+=("| $(date -u +%F) | $t | $secs | ${runs:-?} | no crash |")
done
echo "== all targets ran clean; rows for the log in docs/fuzzing.md:"
printf '%s\n' "${summary[@]}"
