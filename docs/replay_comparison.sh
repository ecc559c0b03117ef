#!/usr/bin/env bash
# The replay comparison: IMPALA on Pong (Nature network, the defaults otherwise), 2M frames a run,
#   A no replay, B queue 0.5 + standard 0.5, C B with --kl-mask, D queue 0.5 + elite sampling (strategy 3)
#   scoring every step of each unroll ("score_steps": null), E D scoring the first 5 of each unroll's 20 steps
#   ("score_steps": 5, elite sampling's default; not run unless named in CONFIGS),
# interleaved by seed (A1 B1 C1 D1 A2 ...) so that a comparison cut short still has every configuration.
# Always in float32 (--no-bf16), so that runs made on machines with and without native bf16 compare.
#   bash docs/replay_comparison.sh [SEEDS...]        (default 1 2 3; output in sweeps/replay/<config>-s<seed>)
#   CONFIGS="E" bash docs/replay_comparison.sh 1 2 3  (some configurations only; default A B C D)
# Each finished run's args.json, summary.json and progress.csv are copied to docs/replay_runs/<config>-s<seed>/
# (small, committed: the table outlives the machine); then: python docs/replay_table.py
set -u
cd "$(dirname "$0")/.."
Q='{"type": "queue", "capacity": 1, "sample_ratio": 0.5}'
STD='{"type": "standard", "capacity": 1000, "sample_ratio": 0.5}'
ELITE_='{"type": "custom", "capacity": 1000, "sample_ratio": 0.5, "dist_function": "ln_norm", "sample_strategy": "elite_sampling", "lambda_batch_multiplier": 6, "alfa_annealing_factor": 2.0, "elite_sampling_strategy": "strategy3"'
ELITE="$ELITE_, \"score_steps\": null}"
ELITE5="$ELITE_, \"score_steps\": 5}"
SEEDS=("$@"); [ ${#SEEDS[@]} -gt 0 ] || SEEDS=(1 2 3)
for seed in "${SEEDS[@]}"; do
  for config in ${CONFIGS:-A B C D}; do
    out="sweeps/replay/$config-s$seed"
    kept="docs/replay_runs/$config-s$seed"
    if [ ! -e "$kept/summary.json" ] && [ -e "$out/sweep.json" ]; then  # finished before runs were kept in docs/
      mkdir -p "$kept" && cp "$out/run1/args.json" "$out/run1/summary.json" "$out/run1/progress.csv" "$kept/"
    fi
    [ -e "$kept/summary.json" ] && { echo "replay_comparison: $config-s$seed is done, skipped"; continue; }
    [ -e "$out" ] && { echo "replay_comparison: $out was cut short, run again"; rm -rf "$out"; }
    case $config in
      A) extra=();;
      B) extra=(--replay-parameters "[$Q, $STD]");;
      C) extra=(--kl-mask --replay-parameters "[$Q, $STD]");;
      D) extra=(--replay-parameters "[$Q, $ELITE]");;
      E) extra=(--replay-parameters "[$Q, $ELITE5]");;
      *) echo "replay_comparison: unknown configuration $config (A B C D E)"; exit 2;;
    esac
    python -m tools.sweep --runs 1 --seed0 "$seed" --frames 2000000 --budgets 1e6 1.5e6 2e6 --out "$out" \
      -- --algo impala --model nature --no-bf16 "${extra[@]}" || exit $?
    mkdir -p "$kept" && cp "$out/run1/args.json" "$out/run1/summary.json" "$out/run1/progress.csv" "$kept/"
  done
done
