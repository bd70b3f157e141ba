#!/usr/bin/env python3
"""Fails when a named note or a path the docs give does not lead where it says.

Run from anywhere:
    python3 scripts/check_docs.py          # exit 0, or one line per problem and exit 1

The rules:
  Notes. A comment line whose text opens with the note's name in brackets, followed by a colon or by
    nothing and the comment going on below, defines that note ("// Note [Bucket launch order]: buckets
    are ...", "# Note [Which GEMM]:"). Alone on a comment line just above code, it marks that code.
    Every other mention is a reference: "(Note [Bucket launch order])", "see Note [...] in ddp.cpp".
    Every name has exactly one definition, every reference finds it, and a reference that says
    "Note [...] in FILE" names the definition's file. tests/ open a comment with the name of the library
    note they check, so there a line that would define a note the code outside tests/ defines restates
    it; a note of the tests' own (Note [Tests under mpirun]) is defined once in tests/.
  Paths. Every repository path README.md, bench/README.md and docs/*.md name (`distributed/ddp/ddp.cpp`,
    tests/..., scripts/...:120) exists, or is the program the build makes of PATH.cpp; a ":LINE" or
    ":FIRST-LAST" suffix lies within the file.
  Inside. No doc links out of the repository: a Markdown link or a "../" path that leaves it.
"""
import glob
import os
import re
import subprocess
import sys

DOCS = ["README.md", "bench/README.md", "docs/*.md"]
THIS = "scripts/check_docs.py"  # its docstring's examples are not notes

NOTE = re.compile(r"Note \[([^\]]+)\]")
COMMENT_MARK = re.compile(r"^\s*(?://+|#+|/\*+|\*+)\s*")
DEFINITION = re.compile(r"^\s*(?://+|#+|/\*+|\*+)\s*Note \[([^\]]+)\](:|\s*$)")
COMMENT_GOES_ON = re.compile(r"^\s*(?://+|#+|\*+)\s*\S")
IN_FILE = re.compile(r"\s+in\s+`?([\w./-]+\.(?:h|cpp|cu|cuh|py|sh|cmake|txt|md))\b")
# A path: two or more components, the first one an entry of the repository's root (checked below).
PATH = re.compile(r"(?<![\w./~-])((?:\.\./)*[\w.+-]+(?:/[\w.*{},+-]+)+/?)(?::(\d+)(?:-(\d+))?)?")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True)
        return sorted(set(out.stdout.split()))  # a set: a file in a merge conflict is listed once per side
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk it, minus build trees
        files = []
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(folder, n), root) for n in names]
        return sorted(files)


def read_text(root, path):
    try:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None


def logical_lines(text, markdown):
    """Yields (line number, text) with a note's name that wraps onto the next line joined to it."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        j = i
        # 'Note [A failed collective' + '// poisons the queue]' -> one name.
        while re.search(r"Note\s*$|Note \[[^\]]*$", line) and j + 1 < len(lines):
            j += 1
            rest = lines[j].strip() if markdown else COMMENT_MARK.sub("", lines[j])
            line = line.rstrip() + " " + rest
        yield i + 1, line


def check_notes(root, files):
    definitions, tests_definitions, references, errors = {}, {}, [], []
    for path in files:
        if path == THIS or path.endswith(".md") and path not in doc_files(root):
            continue
        text = read_text(root, path)
        if text is None or "Note" not in text:
            continue
        markdown = path.endswith(".md")
        lines = text.split("\n")
        for number, line in logical_lines(text, markdown):
            m = None if markdown else DEFINITION.match(line)
            if m and not m.group(2) and not COMMENT_GOES_ON.match(lines[number] if number < len(lines) else ""):
                m = None  # '// Note [Waiters]' over the code it marks
            if m:
                kind = tests_definitions if path.startswith("tests/") else definitions
                kind.setdefault(m.group(1), []).append(f"{path}:{number}")
            for ref in NOTE.finditer(line):
                if m and ref.start() == m.start(1) - len("Note ["):
                    continue
                where = IN_FILE.match(line, ref.end())
                references.append((f"{path}:{number}", ref.group(1), where.group(1) if where else None))
    for name, places in tests_definitions.items():
        definitions.setdefault(name, places)  # the tests' own notes
    for name, places in sorted(definitions.items()):
        if len(places) > 1:
            errors.append(f"{places[1]}: Note [{name}] is defined again (first at {places[0]}); "
                          f"rename one, or name it inside a sentence where it is only restated")
    for place, name, named_file in references:
        if name not in definitions:
            errors.append(f"{place}: Note [{name}] has no definition (a comment line opening with it)")
        elif named_file:
            defined_in = definitions[name][0].rsplit(":", 1)[0]
            if defined_in != named_file and not defined_in.endswith("/" + named_file):
                errors.append(f"{place}: says Note [{name}] is in {named_file}; it is in {defined_in}")
    return errors


def doc_files(root):
    found = []
    for pattern in DOCS:
        found += sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, pattern)))
    return found


def expand_braces(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",")
            for p in expand_braces(path[:m.start()] + alt + path[m.end():])]


def line_count(root, path):
    text = read_text(root, path)
    return None if text is None else text.count("\n") + (not text.endswith("\n"))


def check_path(root, doc, token, first, last):
    """The problem with one path a doc names, or None."""
    if token.startswith("../"):
        target = os.path.normpath(os.path.join(root, os.path.dirname(doc), token))
        if not target.startswith(root + os.sep):
            return f"names {token}, outside the repository"
        token = os.path.relpath(target, root)
    for path in expand_braces(token.rstrip(",.").rstrip("/")):
        matches = glob.glob(os.path.join(root, path))
        if not matches and os.path.isfile(os.path.join(root, path + ".cpp")):
            continue  # the program the build makes of it: `bench/bench_guards`
        if not matches:
            return f"names {path}, which does not exist"
        if first and os.path.isfile(matches[0]):
            n = line_count(root, os.path.relpath(matches[0], root))
            if n is not None and int(last or first) > n:
                return f"names {path}:{first}{'-' + last if last else ''}, past its last line ({n})"
    return None


def check_docs(root, files):
    top = {f.split("/", 1)[0] for f in files if "/" in f}
    errors = []
    for doc in doc_files(root):
        text = read_text(root, doc)
        in_code_block = False
        for number, line in enumerate(text.split("\n"), 1):
            if line.lstrip().startswith("```"):
                in_code_block = not in_code_block
            for link in LINK.findall(line):
                if re.match(r"[a-z]+:|#", link):
                    continue  # a URL or an anchor of the same page
                target = os.path.normpath(os.path.join(root, os.path.dirname(doc), link.split("#")[0]))
                if not target.startswith(root + os.sep):
                    errors.append(f"{doc}:{number}: links to {link}, outside the repository")
                elif not os.path.exists(target):
                    errors.append(f"{doc}:{number}: links to {link}, which does not exist")
            for m in PATH.finditer(line):
                token, first, last = m.groups()
                head = token.split("/", 1)[0]
                if head != ".." and head not in top:
                    continue  # not a repository path: a URL's tail, a ratio, a build output
                problem = check_path(root, doc, token, first, last)
                if problem:
                    errors.append(f"{doc}:{number}: {problem}")
    return errors


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = tracked_files(root)
    errors = check_notes(root, files) + check_docs(root, files)
    for line in errors:
        print(line)
    if errors:
        print(f"check_docs: {len(errors)} problem(s)")
        return 1
    print("check_docs: every note has one definition, every path a doc names exists inside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
