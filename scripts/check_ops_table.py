#!/usr/bin/env python3
"""Fails when docs/ops.md's op table and the headers it describes disagree.

Run from anywhere:
    python3 scripts/check_ops_table.py      # exit 0, or one line per problem and exit 1

docs/ops.md has one table per namespace, under a heading that names it in backticks (`mt::`,
`mt::nn::functional::`). The checks:
  Names.    Every function a header of that namespace declares (HEADERS below; namespace-level
            declarations returning Tensor, or a tuple, pair or vector of them) has a row, and every
            row names such a function.
  Autograd. The autograd cell names the file that defines the function (`autograd/functions/pad.cpp`),
            and that file holds a definition of it.
  CUDA.     The CUDA cell names a file of tests/cuda/ that says the op's name (the test comparing
            it on the (emulated) GPU with the CPU), or is "—" (no GPU test calls it by name; it
            runs there through the same backend primitives).
  PyTorch.  Each `torch.X`, `F.X` or `Tensor.X` of the PyTorch cell exists in the PyTorch that
            imports here (1.13); skipped, with a line saying so, when none does.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = "docs/ops.md"
HEADERS = {
    "mt::": ["autograd/ops.h", "autograd/spatial_ops.h"],
    "mt::nn::functional::": ["nn/functional.h", "nn/conv.h", "nn/batchnorm.h", "nn/group_norm.h",
                             "nn/layer_norm.h", "nn/embedding.h"],
}
DECLARATION = re.compile(r"^(?:inline\s+)?(?:Tensor|std::(?:tuple|pair|vector)<[^()]*>)\s+(\w+)\(")
NAMESPACE_OPENS = re.compile(r"^namespace ([\w:]+) \{")
CODE = re.compile(r"`([^`]+)`")


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def declared(headers, namespace):
    """The functions the headers declare at the level of `namespace` (e.g. "mt::nn::functional")."""
    names = set()
    for header in headers:
        current = None
        for line in read(header).splitlines():
            opened = NAMESPACE_OPENS.match(line)
            if opened:
                current = opened.group(1)
            elif line.startswith("}  // namespace"):
                current = None
            elif current == namespace:
                m = DECLARATION.match(line)
                if m:
                    names.add(m.group(1))
    return names


def tables(text):
    """{namespace: [(op, cells)]} from the tables under headings that name a namespace of HEADERS."""
    out, namespace = {}, None
    for line in text.splitlines():
        if line.startswith("#"):
            spans = [s for s in CODE.findall(line) if s in HEADERS]
            namespace = spans[0] if spans else None
            if namespace:
                out.setdefault(namespace, [])
        elif namespace and line.startswith("|") and not line.startswith("|-") and not line.startswith("| op "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            op = CODE.findall(cells[0])
            out[namespace].append((op[0] if op else cells[0], cells))
    return out


def defines(path, name):
    text = read(path)
    return re.search(r"^(?:inline\s+)?(?:Tensor|std::[^\n(]*>)\s+(?:functional::)?%s\(" % re.escape(name), text, re.M)


def torch_lookup():
    try:
        import torch  # noqa: F401
        import torch.nn.functional as F
    except ImportError:
        return None
    roots = {"torch": torch, "F": F, "Tensor": torch.Tensor}

    def exists(dotted):
        parts = dotted.split(".")
        obj = roots.get(parts[0])
        for part in parts[1:]:
            obj = getattr(obj, part, None)
        return obj is not None
    return exists


def main():
    problems = []
    found = tables(read(TABLE))
    torch_exists = torch_lookup()
    if torch_exists is None:
        print("check_ops_table: no PyTorch here, the PyTorch names are not checked")
    for namespace, headers in HEADERS.items():
        rows = found.get(namespace)
        if rows is None:
            problems.append(f"{TABLE}: no table under a heading naming `{namespace}`")
            continue
        want = declared(headers, namespace.rstrip(":"))
        have = [op for op, _ in rows]
        for name in sorted(want - set(have)):
            problems.append(f"{TABLE}: `{namespace}{name}` is declared in {', '.join(headers)} but has no row")
        for name in have:
            if name not in want:
                problems.append(f"{TABLE}: row `{namespace}{name}` names no function declared in {', '.join(headers)}")
        for op, cells in rows:
            if len(cells) != 6:
                problems.append(f"{TABLE}: row `{op}` has {len(cells)} cells, not 6")
                continue
            _, _, cuda, autograd, pytorch, _ = cells
            files = [s for s in CODE.findall(autograd) if s.endswith(".cpp") or s.endswith(".h")]
            if not files or not os.path.exists(os.path.join(ROOT, files[0])) or not defines(files[0], op):
                problems.append(f"{TABLE}: `{op}`'s autograd cell must name the file defining it, got '{autograd}'")
            if cuda != "—":
                tests = [s for s in CODE.findall(cuda)]
                path = os.path.join("tests/cuda", tests[0]) if tests else ""
                if not tests or not os.path.exists(os.path.join(ROOT, path)):
                    problems.append(f"{TABLE}: `{op}`'s CUDA cell must name a file of tests/cuda or be —, got '{cuda}'")
                elif not re.search(r"\b%s\b" % re.escape(op), read(path)):
                    problems.append(f"{TABLE}: `{op}`'s CUDA cell names {path}, which does not mention it")
            if torch_exists:
                for span in CODE.findall(pytorch):
                    dotted = span.split("(")[0]
                    if dotted.split(".")[0] in ("torch", "F", "Tensor") and not torch_exists(dotted):
                        problems.append(f"{TABLE}: `{op}`'s PyTorch name {dotted} does not exist in this PyTorch")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
