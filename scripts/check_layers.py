#!/usr/bin/env python3
"""Fails when an #include points up a layer, or across rooms of distributed/ that the design forbids,
or when a public header includes a private one (a header in a detail/ folder: not installed).

The layers and rooms, and why each arrow is allowed, are drawn in docs/design.md ("Layers" and
"The rooms of distributed/"); this script is that drawing as data. Run from anywhere:
    python3 scripts/check_layers.py          # exit 0, or one line per bad include and exit 1

Only project includes ("layer/file.h") are checked; system and library headers (<...>) are not.
"""
import os
import re
import sys

# What each top-level layer may include besides itself (dependencies point down only).
LAYERS = {
    "tensor": [],
    "trace": [],
    "autograd": ["tensor", "trace"],
    "nn": ["tensor", "trace", "autograd"],
    "optim": ["tensor", "trace", "autograd", "nn"],
    "data": ["tensor", "trace"],
    "distributed": ["tensor", "trace", "autograd", "nn", "optim", "data"],
    "apps": ["tensor", "trace", "autograd", "nn", "optim", "data", "distributed", "apps"],
}

# The rooms of distributed/, bottom to top, and the rooms each may include besides itself.
# "" is the layer's own root: errors.h, which every room shares.
ROOMS = {
    "": [],
    "store": [""],
    "process_group": ["", "store"],
    "process_group/gloo": ["", "store", "process_group"],
    "process_group/mpi": ["", "store", "process_group"],
    "process_group/nccl": ["", "store", "process_group"],
    "fault": ["", "store", "process_group"],
    "trace": ["", "process_group"],
    "ddp": ["", "process_group", "fault"],
    "zero": ["", "process_group", "fault", "ddp"],
}

# Single files allowed one arrow their room is not, each with its reason.
EXCEPTIONS = {
    # The registry enters the backends that come with the library itself ("local", and "nccl",
    # which says "no NCCL" in a build without it); gloo and mpi register themselves from their
    # components (Note [Backends register themselves]).
    ("distributed/process_group/backends.cpp", "distributed/process_group/nccl"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_EXTENSIONS = (".h", ".cpp", ".cu", ".cuh")


# The backends' own folders: only the library's sources include their headers (tensor/cpu/'s use
# Eigen, tensor/cuda/'s the CUDA runtime), so, like detail/, they are not installed.
BACKEND_FOLDERS = ("tensor/cpu/", "tensor/cuda/")


def is_private(path):
    """A header in a detail/ folder (or a backend's folder) is the code beside it's own: not
    installed, so no public header may include it (docs/design.md, "Public headers")."""
    return "/detail/" in "/" + path or path.startswith(BACKEND_FOLDERS)


def room_of(path):
    """'distributed/ddp/ddp.h' -> 'ddp'; 'distributed/errors.h' -> ''; a detail/ folder is its room's."""
    folder = os.path.dirname(path)
    if folder.endswith("/detail"):
        folder = folder[: -len("/detail")]
    return folder[len("distributed/"):] if folder.startswith("distributed/") else ""


def check(root):
    errors = []
    for layer in LAYERS:
        for folder, _, names in os.walk(os.path.join(root, layer)):
            for name in sorted(names):
                if not name.endswith(SOURCE_EXTENSIONS):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
                    target_layer = target.split("/", 1)[0]
                    if target_layer not in LAYERS or "/" not in target:
                        continue  # a file of the same folder, or not the project's
                    if path.endswith(".h") and not is_private(path) and is_private(target) and layer != "apps":
                        errors.append(f"{path}: a public header includes {target}, a private one (detail/: "
                                      f"not installed); forward-declare what it needs instead")
                    if target_layer != layer and target_layer not in LAYERS[layer]:
                        errors.append(f"{path}: includes {target}: {layer}/ may not include {target_layer}/ "
                                      f"(dependencies point down: docs/design.md, Layers)")
                    elif layer == target_layer == "distributed":
                        errors += check_room(path, target)
    return errors


def check_room(path, target):
    source, dest = room_of(path), room_of(target)
    if source not in ROOMS:
        return [f"{path}: distributed/{source}/ is not a room of docs/design.md (add it there and here)"]
    if dest not in ROOMS:
        return [f"{path}: includes {target}, in distributed/{dest}/, which is not a room"]
    if dest == source or dest in ROOMS[source] or (path, "distributed/" + dest) in EXCEPTIONS:
        return []
    return [f"{path}: includes {target}: the room distributed/{source or '.'}/ may not include "
            f"distributed/{dest or '.'}/ (docs/design.md, The rooms of distributed/)"]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    errors = check(root)
    for line in errors:
        print(line)
    if errors:
        print(f"check_layers: {len(errors)} include(s) against the layers")
        return 1
    print("check_layers: every include points down a layer or to an allowed room")
    return 0


if __name__ == "__main__":
    sys.exit(main())
