# torchrun (torch.distributed.run) as Debian's python3-torch 1.13 ships it, with one fix so that it
# starts under Python 3.11: its Std.from_str looks a redirect value up by iterating the IntFlag Std,
# which no longer yields the zero member NONE in 3.11, so "0" (the default: no redirects) became None
# and torchrun failed before starting any worker. Everything else is torchrun itself, and where
# from_str works as it is (other Pythons or torches), it is left alone. Run it through torchrun.sh:
#   scripts/torchrun.sh --nproc_per_node 2 --no_python build/mini_train ...
import re
import sys

from torch.distributed.elastic.multiprocessing import api


def from_str(cls, vm):
    if re.match(api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(api._MAPPING_REGEX, vm):
        return {int(k): cls(int(v)) for k, v in (pair.split(":") for pair in vm.split(","))}
    raise ValueError(f"{vm} does not match {api._VALUE_REGEX} or {api._MAPPING_REGEX}")


def broken():
    try:
        return api.Std.from_str("0") is None
    except Exception:
        return True


if broken():
    api.Std.from_str = classmethod(from_str)

from torch.distributed.run import main  # noqa: E402  (after the fix, which it reads at import)

sys.exit(main())
