#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers of untrusted input (fuzz/, cargo fuzz + libFuzzer;
# targets and findings in fuzz/README.md).
#
#   bash scripts/fuzz.sh [smoke|long|build] [TARGET...]
#
#   smoke   every target (or the ones named) for FUZZ_SECONDS each, default 20: CI's run
#           (scripts/test.sh), about 3 minutes for the nine targets once built
#   long    the same for FUZZ_SECONDS each, default 300
#   build   only build the targets
#
# Each target starts from its seeds (the spec examples in tests/fixtures/, pipelines/*.toml,
# fuzz/seeds/<target>/) plus fuzz/regressions/<target>/ (inputs that once failed, all
# replayed first) and a growing corpus kept outside the clone. A crash, a failed assertion,
# a timeout (FUZZ_TIMEOUT s for one input, default 10) or memory over FUZZ_RSS_MB (default
# 2048) fails the run; the input is saved under $FUZZ_ARTIFACTS/<target>/ and named in the
# output. Replay one with `<binary> <file>` (the binary is printed), or copy it into
# fuzz/regressions/<target>/ once the bug is fixed. One process per target (one core), so
# the machine's other core stays free.
#
# The summary line of each target (runs, exec/s, cov, ft, corpus, verdict) is also appended
# to $FUZZ_ARTIFACTS/summary.txt.
#
# Caches (outside the clone, reused across runs, safe to delete):
#   RSAGG_CACHE       default $HOME/.cache/rsagg
#   FUZZ_TOOLS        default $RSAGG_CACHE/tools (cargo-fuzz is installed here when missing)
#   FUZZ_TARGET_DIR   default $RSAGG_CACHE/fuzz-target (libFuzzer-instrumented builds)
#   FUZZ_CORPUS       default $RSAGG_CACHE/fuzz-corpus (the grown corpus, per target)
#   FUZZ_ARTIFACTS    default $RSAGG_CACHE/fuzz-artifacts (failing inputs, summary.txt)
# Other knobs: FUZZ_SANITIZER (default none; `address` for ASan, which only matters for the
# unsafe code of dependencies), FUZZ_EXTRA (more libFuzzer flags).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

mode=${1:-smoke}
[[ $# -gt 0 ]] && shift
case $mode in
  # The smoke run (CI) uses a fixed random seed (FUZZ_SEED, default 1) so that a CI run does
  # not fail at random on a finding unrelated to the change under test; long runs vary it.
  smoke) seconds=${FUZZ_SECONDS:-20}; seed=${FUZZ_SEED:-1} ;;
  long) seconds=${FUZZ_SECONDS:-300}; seed=${FUZZ_SEED:-0} ;;
  build) seconds=0; seed=0 ;;
  *) echo "usage: $0 [smoke|long|build] [TARGET...]" >&2; exit 2 ;;
esac

export RSAGG_CACHE=${RSAGG_CACHE:-$HOME/.cache/rsagg}
tools=${FUZZ_TOOLS:-$RSAGG_CACHE/tools}
target_dir=${FUZZ_TARGET_DIR:-$RSAGG_CACHE/fuzz-target}
corpus_root=${FUZZ_CORPUS:-$RSAGG_CACHE/fuzz-corpus}
artifacts=${FUZZ_ARTIFACTS:-$RSAGG_CACHE/fuzz-artifacts}
sanitizer=${FUZZ_SANITIZER:-none}
timeout=${FUZZ_TIMEOUT:-10}
rss=${FUZZ_RSS_MB:-2048}
cargo_fuzz_version=0.13.2

all=(sitemap_reader sitemap_tokenizer dump_zip dump_manifest link_header html_links websub_form config oai_response)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${all[@]}")

# Seeds of each target (read-only corpus directories).
seeds() {
  local fx=$root/tests/fixtures
  case $1 in
    sitemap_reader | sitemap_tokenizer)
      echo "$fx/spec-1.1 $fx/notification-1.0.1 $fx/real-world" ;;
    dump_manifest) echo "$fx/spec-1.1" ;;
    config) echo "$root/pipelines" ;;
    *) echo "$root/fuzz/seeds/$1" ;;
  esac
}

start=$(date +%s)
# cargo-fuzz and libfuzzer-sys pass nightly-only flags (-Z sanitizer, -C passes=sancov…);
# RUSTC_BOOTSTRAP lets the stable toolchain accept them, as CI has no nightly.
export RUSTC_BOOTSTRAP=1
export PATH=$tools/bin:$PATH
if [[ $(cargo fuzz --version 2>/dev/null) != "cargo-fuzz $cargo_fuzz_version" ]]; then
  echo "[fuzz] installing cargo-fuzz $cargo_fuzz_version into $tools" >&2
  CARGO_TARGET_DIR=$RSAGG_CACHE/tools-build \
    cargo install cargo-fuzz --locked --version "$cargo_fuzz_version" --root "$tools"
fi

# One build for every target (-a: debug assertions and overflow checks, in release mode;
# 16 codegen units build faster on two cores than cargo-fuzz's default of one).
(cd fuzz && cargo fuzz build -O -a -s "$sanitizer" --codegen-units 16 --target-dir "$target_dir")
bin_dir=$target_dir/x86_64-unknown-linux-gnu/release
echo "[fuzz] built after $(( $(date +%s) - start ))s" >&2
[[ $mode == build ]] && exit 0

mkdir -p "$artifacts"
failed=()
for t in "${targets[@]}"; do
  bin=$bin_dir/$t
  [[ -x $bin ]] || { echo "[fuzz] no target $t (known: ${all[*]})" >&2; exit 2; }
  corpus=$corpus_root/$t
  mkdir -p "$corpus" "$artifacts/$t"
  dirs=("$corpus")
  [[ -d fuzz/regressions/$t ]] && dirs+=("fuzz/regressions/$t")
  for d in $(seeds "$t"); do dirs+=("$d"); done
  log=$artifacts/$t.log
  echo "[fuzz] $t: ${seconds}s from ${dirs[*]}" >&2
  set +e
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb="$rss" \
    -artifact_prefix="$artifacts/$t/" -print_final_stats=1 -seed="$seed" ${FUZZ_EXTRA:-} \
    "${dirs[@]}" >"$log" 2>&1
  rc=$?
  set -e
  # The last status line: "#RUNS <event> cov: C ft: F corp: N/SIZE … exec/s: E rss: R".
  status=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  runs=$(grep -oE 'stat::number_of_executed_units:[[:space:]]+[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  cov=$(grep -oE 'cov: [0-9]+' <<<"$status" | grep -oE '[0-9]+' || true)
  ft=$(grep -oE 'ft: [0-9]+' <<<"$status" | grep -oE '[0-9]+' || true)
  corp=$(grep -oE 'corp: [0-9]+' <<<"$status" | grep -oE '[0-9]+' || true)
  eps=$(grep -oE 'stat::average_exec_per_sec:[[:space:]]+[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  if [[ $rc -eq 0 ]]; then verdict=ok; else verdict="FAILED (exit $rc)"; failed+=("$t"); fi
  line="$(date -u +%FT%TZ) $mode $t: ${seconds}s runs=${runs:-?} exec/s=${eps:-?} cov=${cov:-?} ft=${ft:-?} corpus=${corp:-?} $verdict"
  echo "[fuzz] $line" >&2
  echo "$line" >>"$artifacts/summary.txt"
  if [[ $rc -ne 0 ]]; then
    grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written|deadly signal|timeout|out-of-memory' "$log" | head -20 >&2 || true
    echo "[fuzz] $t: full log $log; replay: $bin <input>" >&2
  fi
done
echo "[fuzz] $mode run of ${#targets[@]} target(s) done in $(( $(date +%s) - start ))s" >&2
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "[fuzz] FAILED: ${failed[*]}" >&2
  exit 1
fi
