#!/usr/bin/env bash
# bench/guards.sh: the timing targets of the distributed guards (issue 14), measured on mini_train:
#   stopped   a worker of `mini_train --nproc 3` stopped with SIGSTOP, default settings: seconds until
#             the job has ended, naming that rank (target <= 45 s; --heartbeat-timeout is 30 s)
#   absent    rank 1 of 2 whose rank 0 never comes (MASTER_ADDR 192.0.2.1, an address reserved for
#             documentation that nobody answers at), --timeout 20: seconds to the first "waited"
#             line (target <= 11 s) and to the end of the job (target: at --timeout)
#   bench/guards.sh [BUILD_DIR]      (default build/; needs mini_train built with Gloo)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mini_train=${1:-$repo/build}/mini_train
[[ -x $mini_train ]] || { echo "guards.sh: no $mini_train (build it first)" >&2; exit 1; }
work=$(mktemp -d /tmp/minitrain-guards.XXXXXX)
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.1f}')"; }

# stopped: the launcher's workers are its children; stop the second one mid-training.
"$mini_train" --nproc 3 --backend gloo --epochs 100000 --samples 3000 -q --save "$work/x.safetensors" \
  >"$work/stopped.log" 2>&1 &
launcher=$!
sleep 3
victim=$(pgrep -P "$launcher" | sed -n 2p)
t0=$(now)
kill -STOP "$victim"
wait "$launcher" || true
t1=$(now)
named=no
grep -q "rank 1 stopped" "$work/stopped.log" && named=yes
echo "minitrain stopped_rank_job_end_s $(elapsed "$t0" "$t1")"
echo "# stopped: rank 1 named: $named; $(tail -1 "$work/stopped.log")" >&2

# absent: a line every 10 s while rank 0's store does not answer, the error at --timeout.
t0=$(now)
RANK=1 WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 MASTER_PORT=29555 "$mini_train" --backend gloo --timeout 20 \
  2>&1 | while IFS= read -r line; do echo "$(now) $line"; done >"$work/absent.log" || true
t1=$(now)
first=$(grep -m1 "waited" "$work/absent.log" | cut -d' ' -f1)
echo "minitrain absent_rank_first_line_s $(elapsed "$t0" "$first")"
echo "minitrain absent_rank_job_end_s $(elapsed "$t0" "$t1")"
echo "# absent: $(grep -m1 waited "$work/absent.log" | cut -d' ' -f2-)" >&2
