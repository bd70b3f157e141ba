#!/usr/bin/env bash
# torchrun, as Debian 12 ships it (python3-torch 1.13 under Python 3.11), fails in Std.from_str
# before it starts a single worker. This runs the same torchrun with that one fix (scripts/torchrun.py;
# where torchrun works as it is, nothing is changed). Use it wherever torchrun is written:
#   scripts/torchrun.sh --nproc_per_node 2 --no_python build/mini_train --backend gloo
# MT_TORCHRUN_PYTHON: the interpreter with torch (default /usr/bin/python3, Debian's).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "${MT_TORCHRUN_PYTHON:-/usr/bin/python3}" "$here/torchrun.py" "$@"
