#!/usr/bin/env bash
# Checks and measurements that need a CUDA GPU: the GPU tests, learning on a GPU, A3G's and IMPALA's frames/s on a
# GPU against the CPU alone, and Pong to a mean of 20. Nothing here runs in CI; on a machine without CUDA each
# check stops with one line. Each check is sized to finish within 10 minutes.
#
# The GPU machine needs no package registry. On a machine that has one, once:   bash docs/gpu_checks.sh wheels
#   cp312 wheels of what a CUDA image with torch usually lacks (gymnasium, ale-py with its ROMs,
#   farama-notifications; ~4 MB) into .whl/ (git-ignored); copy .whl/ with the working tree to the GPU machine,
#   which is expected to have torch (CUDA), opencv, tensorboard, matplotlib and pytest already.
# On the GPU machine (each check prints what it measured and writes its files to $OUT):
#   bash docs/gpu_checks.sh smoke           GPU tests, CartPole solved on cuda:0, gym_eval on the GPU  (~5 min)
#   bash docs/gpu_checks.sh bench           A3G on the GPU against --gpu-ids -1 on the same cores, IMPALA's
#                                           learner on the GPU with and without replay and with its inference
#                                           server, in one bench run                                      (~9 min)
#   bash docs/gpu_checks.sh all SECONDS     all of it shortened to finish within SECONDS: the GPU tests, CartPole on
#                                           cuda:0 (at most 100 s), the bench's GPU configurations (15 s each) and the
#                                           CPU baseline, then Pong with the GPU defaults for the seconds left
#   bash docs/gpu_checks.sh pong SEED [FLAGS...]
#                                           Pong to mean 20 (--stop-score 20), at most 9 minutes a run;
#                                           FLAGS: the fastest configuration the bench found
#   bash docs/gpu_checks.sh atari GAME SEED SECONDS [FLAGS...]
#                                           the GPU tests, then <GAME>NoFrameskip-v4 with the defaults to 20M frames
#                                           or SECONDS in all, whichever comes first; the run's records as one
#                                           archive (args.json, summary.json, progress.csv, games.csv, the
#                                           TensorBoard log with the losses and entropy, best model); check the
#                                           model's units with python docs/dead_units.py
# Learning on Pong is stated as the median and worst of three runs of `pong` (three seeds).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_checks_out}
mkdir -p "$OUT"
check=${1:-}
shift || true

need_cuda() {
  python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
    { echo "gpu_checks: no CUDA device on this machine: run the '$check' check on a machine with a GPU" >&2; exit 2; }
}

local_wheels() {  # the wheels of .whl/, into a folder of their own (never the image's site-packages)
  [ -d .whl ] || { echo "gpu_checks: no .whl/ here: run 'bash docs/gpu_checks.sh wheels' first and copy .whl/ here" >&2; exit 2; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
    exit 1
  export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
  python3 -c "import torch; print('gpu_checks: torch', torch.__version__, 'on', torch.cuda.get_device_name(0))"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
}

case $check in
  wheels)
    rm -rf .whl && mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 -d .whl gymnasium==1.4.0 ale-py==0.12.1 farama-notifications==0.0.6 || exit 1
    ls -la .whl;;
  smoke)
    need_cuda; local_wheels
    python3 -m pytest -q tests/test_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -5
    python3 main.py --env CartPole-v1 --gpu-ids 0 --workers 4 --stop-score 475 --max-seconds 240 \
      --no-tensorboard-logger --run-dir /tmp/cartpole_gpu --save-model-dir /tmp/cartpole_gpu/models \
      --log-dir /tmp/cartpole_gpu/logs 2>&1 | tail -8
    cp /tmp/cartpole_gpu/summary.json "$OUT/cartpole_gpu_summary.json"
    python3 gym_eval.py --env CartPole-v1 --load-model-dir /tmp/cartpole_gpu/models --num-episodes 10 \
      --gpu-id 0 --log-dir /tmp/cartpole_gpu/logs 2>&1 | tail -3;;
  bench)
    need_cuda; local_wheels
    # A3G with 16 workers on one GPU and on the CPU alone (a3clstm:1, rl_a3c_pytorch's recipe, as the baseline);
    # IMPALA's learner on the GPU without and with replay (half of each batch replayed: on a CPU, where the learner
    # is the bottleneck, that halves the fresh frames/s; on a GPU the question is how much of A's frames/s B keeps)
    # and with the inference server
    python3 -m tools.bench --configs a3clstm:1 a3clstm:8:batched nature:8:batched nature:32:batched nature:8:impala \
      nature:8:impala:replay nature:8:impala:server --seconds 20 --warmup 10 --emulator-seconds 5 --json "$OUT/bench_gpu.json" 2>&1 |
      tee "$OUT/bench_gpu.log" | grep -v "^bench: started"
    python3 -m tools.bench --configs nature:8:batched --gpu-ids -1 --seconds 20 --warmup 10 --emulator-seconds 5 \
      --json "$OUT/bench_cpu.json" 2>&1 | tee "$OUT/bench_cpu.log" | tail -4;;
  all)
    need_cuda; local_wheels
    # many files: they leave as one archive in $OUT, whatever stops the checks
    final=$OUT; OUT=/tmp/gpu_checks_all; mkdir -p "$OUT"
    trap 'tar czf "$final/gpu_checks_all.tgz" -C "$OUT" .' EXIT
    deadline=$(( $(date +%s) + ${1:?"gpu_checks: all needs its length in seconds"} ))
    timeout 200 python3 -m pytest -q tests/test_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -3
    timeout 150 python3 main.py --env CartPole-v1 --gpu-ids 0 --workers 4 --stop-score 475 --max-seconds 100 \
      --no-tensorboard-logger --run-dir /tmp/cartpole_gpu --save-model-dir /tmp/cartpole_gpu/models \
      --log-dir /tmp/cartpole_gpu/logs > "$OUT/cartpole_gpu.log" 2>&1; tail -3 "$OUT/cartpole_gpu.log"
    cp /tmp/cartpole_gpu/summary.json "$OUT/cartpole_gpu_summary.json"
    timeout 60 python3 gym_eval.py --env CartPole-v1 --load-model-dir /tmp/cartpole_gpu/models --num-episodes 10 \
      --gpu-id 0 --log-dir /tmp/cartpole_gpu/logs 2>&1 | tail -2 | tee -a "$OUT/cartpole_gpu.log"
    timeout 300 python3 -m tools.bench --configs a3clstm:1 nature:8:batched nature:8:impala nature:8:impala:server \
      --seconds 15 --warmup 8 --emulator-seconds 4 --json "$OUT/bench_gpu.json" 2>&1 | grep -v "^bench: started" |
      grep -v "^Time " | tee "$OUT/bench_gpu.log" | tail -8
    timeout 90 python3 -m tools.bench --configs nature:8:batched --gpu-ids -1 --seconds 15 --warmup 8 \
      --emulator-seconds 4 --json "$OUT/bench_cpu.json" 2>&1 | grep -v "^bench: started" | grep -v "^Time " |
      tee "$OUT/bench_cpu.log" | tail -4
    left=$(( deadline - $(date +%s) - 25 ))
    if [ "$left" -gt 60 ]; then
      python3 main.py --seed 1 --stop-score 20 --max-seconds "$left" --no-tensorboard-logger --run-dir /tmp/pong_gpu \
        --save-model-dir /tmp/pong_gpu/models --log-dir /tmp/pong_gpu/logs > "$OUT/pong_gpu.log" 2>&1
      tail -4 "$OUT/pong_gpu.log"; cp /tmp/pong_gpu/summary.json "$OUT/pong_gpu_summary.json"
      cp /tmp/pong_gpu/progress.csv "$OUT/pong_gpu_progress.csv"
    else echo "gpu_checks: ${left}s left, no Pong run"; fi;;
  pong)
    need_cuda; local_wheels
    seed=${1:?"gpu_checks: pong needs a seed"}; shift
    run=/tmp/pong_gpu_s$seed
    python3 main.py --seed "$seed" --stop-score 20 --max-seconds 540 --no-tensorboard-logger "$@" --run-dir "$run" \
      --save-model-dir "$run/models" --log-dir "$run/logs" 2>&1 | tail -6
    cp "$run/summary.json" "$OUT/pong_s${seed}_summary.json"; cp "$run/progress.csv" "$OUT/pong_s${seed}_progress.csv";;
  atari)
    need_cuda; local_wheels
    game=${1:?"gpu_checks: atari needs a game"}; seed=${2:?"gpu_checks: atari needs a seed"}
    deadline=$(( $(date +%s) + ${3:?"gpu_checks: atari needs its length in seconds"} )); shift 3
    run=/tmp/atari_gpu/${game}_s$seed
    trap 'tar czf "$OUT/${game}_s$seed.tgz" --exclude="checkpoint*" -C /tmp/atari_gpu "${game}_s$seed"' EXIT
    timeout 120 python3 -m pytest -q tests/test_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -3
    left=$(( deadline - $(date +%s) - 20 ))
    python3 main.py --env "${game}NoFrameskip-v4" --seed "$seed" --max-frames 20000000 --max-seconds "$left" \
      "$@" --run-dir "$run" --save-model-dir "$run/models" --log-dir "$run/logs" > "$OUT/${game}_s$seed.log" 2>&1
    tail -6 "$OUT/${game}_s$seed.log";;
  *)
    echo "gpu_checks: usage: bash docs/gpu_checks.sh wheels|smoke|bench|all SECONDS|pong SEED [FLAGS...]|atari GAME SEED SECONDS [FLAGS...]" >&2
    exit 2;;
esac
