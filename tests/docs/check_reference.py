#!/usr/bin/python3
"""The reference documentation against the code, both ways:

  - every flag of iscsigwd (server/flags.cc), iscsigw-csi (server/csi_flags.cc) and iscsigwctl's
    global flags (server/iscsigwctl.cc), with its environment variable, has a row in its binary's
    section of docs/reference/flags.md;
  - every option of every iscsigwctl command (server/ctl/, one file per noun) has a row under that
    command's heading in docs/reference/cli.md;
  - every metric family the code registers (Family("name", ...) or simple("name", ...) anywhere in
    the sources) has a row in docs/reference/metrics.md;

and nothing is documented there that the code no longer has. For the flags of the three programs
the row's default column must also hold the default the code gives (the member's initialiser in
the flags struct) and its range column the CLI::Range the code checks.

A row is a table line whose first
cell starts with the name in backquotes (| `--portal` | ..., or several: | `-o`, `--output` |); a
flag's environment variable is written in the same row.

Usage: check_reference.py [--self-test]
Exit 1 with one line per name missing or stale. --self-test plants an undocumented flag, version
flag, command option and metric, a documented flag that does not exist and a changed default in a
copy of the tree, and fails unless each is reported."""
import glob
import os
import re
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = ("base", "dataplane", "controlplane", "server", "csi", "rpc")
FLAGS_DOC = "docs/reference/flags.md"
CLI_DOC = "docs/reference/cli.md"
METRICS_DOC = "docs/reference/metrics.md"
# Binary -> the files that define its command line, read as one text in this order (a pattern
# stands for its matches, sorted): iscsigwctl's program and global flags, then one file per noun.
BINARIES = {
    "iscsigwd": ("server/flags.cc",),
    "iscsigw-csi": ("server/csi_flags.cc",),
    "iscsigwctl": ("server/iscsigwctl.cc", "server/ctl/*.cc"),
}
# Binary -> the file whose struct holds the defaults of its program-level flags, and where named
# constants in those defaults and ranges are defined.
DEFAULTS = {
    "iscsigwd": "server/flags.h",
    "iscsigw-csi": "server/csi_flags.h",
    "iscsigwctl": "server/ctl/client.h",
}
CONSTANTS = "controlplane/state/limits.h"

# `X = P->add_subcommand("name"` (P may be `app.`), and `X->add_option("names"` / add_flag /
# set_version_flag.
SUBCOMMAND = re.compile(r'(?:(\w+)\s*=\s*)?(\w+)\s*(?:->|\.)\s*add_subcommand\(\s*"([^"]+)"')
OPTION = re.compile(r'(\w+)\s*(?:->|\.)\s*(?:add_(?:option|flag)|set_version_flag)\(\s*"([^"]+)"')
ENVNAME = re.compile(r'envname\(\s*"([^"]+)"\s*\)')
FAMILY = re.compile(r'\b(?:Family|simple)\(\s*"([a-z_][a-z0-9_]*)"')
ROW = re.compile(r'^\|\s*(`[^|]*)\|')
HEADING = re.compile(r'^(#+)\s+(.*?)\s*$')


def read(repo, rel):
    with open(os.path.join(repo, rel), errors="replace") as f:
        return f.read()


def source_text(repo, binary):
    """The text of the files that define BINARY's command line, one after the other."""
    parts = []
    for spec in BINARIES[binary]:
        matches = sorted(glob.glob(os.path.join(repo, spec)))
        parts += [read(repo, os.path.relpath(m, repo)) for m in matches]
    return "\n".join(parts)


def dashed(names):
    """The option names of a CLI11 name list ("-o,--output"): those that start with a dash
    (the others are positional arguments)."""
    return [n.strip() for n in names.split(",") if n.strip().startswith("-")]


def statement_end(text, i):
    """The index of the ';' that ends the C++ statement going on at i, string and character
    literals skipped."""
    quote = None
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == ";":
            return i
        i += 1
    return i


def code_options(text):
    """{command path (a tuple, () for the program itself): {option: env var or None}} from one
    CLI11 definition, in the order of the source: a variable reused for another subcommand takes
    the new path from its assignment on."""
    events = [(m.start(), "sub", m) for m in SUBCOMMAND.finditer(text)]
    events += [(m.start(), "opt", m) for m in OPTION.finditer(text)]
    path_of = {"app": ()}
    out = {(): {}}
    for pos, kind, m in sorted(events, key=lambda e: e[0]):
        if kind == "sub":
            var, parent, name = m.groups()
            path = path_of.get(parent, ()) + (name,)
            out.setdefault(path, {})
            if var:
                path_of[var] = path
            continue
        var, names = m.groups()
        if var not in path_of:
            continue
        stmt = text[m.end():statement_end(text, m.end())]
        env = ENVNAME.search(stmt)
        for n in dashed(names):
            out.setdefault(path_of[var], {})[n] = env.group(1) if env else None
    return out


# `app.add_option("names", f->member` (or g.member), and a CLI::Range(lo, hi) in its statement.
TOP_OPTION = re.compile(r'\bapp\s*\.\s*add_(?:option|flag)\(\s*"([^"]+)"\s*,\s*\w+\s*(?:->|\.)\s*(\w+)')
RANGE = re.compile(r'CLI::Range\(\s*([\w:]+)\s*,\s*([\w:]+)\s*\)')
MEMBER = re.compile(r'^\s*[\w:<>]+\s+(\w+)\s*=\s*([^;]+);', re.M)
CONSTANT = re.compile(r'\b(k\w+)\s*=\s*(\w+)\s*;')


def resolve(token, constants):
    """A C++ literal or named constant as the text the docs show: 30u -> 30, "info" -> info,
    state::kDefaultMaxTargets -> 4096."""
    token = token.strip()
    seen = set()
    while True:
        name = token.split("::")[-1]
        if name in constants and name not in seen:
            seen.add(name)
            token = constants[name]
            continue
        break
    if token.startswith('"') and token.endswith('"'):
        return token[1:-1]
    m = re.fullmatch(r"(\d+)[uUlL]*", token)
    return m.group(1) if m else token


def code_defaults(repo, binary):
    """{flag: (default or None, (lo, hi) or None)} of a program's own flags: the default from the
    member's initialiser (None for none, an empty string or a list), the range from CLI::Range."""
    text = source_text(repo, binary)
    constants = dict(CONSTANT.findall(read(repo, CONSTANTS)))
    members = {name: value for name, value in MEMBER.findall(read(repo, DEFAULTS[binary]))}
    out = {}
    for m in TOP_OPTION.finditer(text):
        names, member = m.groups()
        stmt = text[m.end():statement_end(text, m.end())]
        rng = RANGE.search(stmt)
        default = members.get(member)
        default = resolve(default, constants) if default is not None else None
        if default in ("", "{}"):
            default = None
        limits = (resolve(rng.group(1), constants), resolve(rng.group(2), constants)) if rng else None
        for n in dashed(names):
            out[n] = (default, limits)
    return out


def cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def compare_defaults(where, defaults, rows, problems):
    """Rows are | flag | variable | default | range | what |."""
    by_name = {}
    for name, row in rows:
        by_name.setdefault(name, row)
    for name, (default, limits) in sorted(defaults.items()):
        row = by_name.get(name)
        if row is None:
            continue  # reported as undocumented
        c = cells(row)
        if len(c) < 5:
            problems.append(f"{where}: {name}: its row has no default and range columns")
            continue
        if default is not None and not re.search(r"(^|[\s`(])" + re.escape(default) + r"($|[\s`,;)])",
                                                 c[2]):
            problems.append(f"{where}: {name}: the code's default {default} is not in its row")
        if limits is not None and f"{limits[0]}..{limits[1]}" not in c[3]:
            problems.append(f"{where}: {name}: the code's range {limits[0]}..{limits[1]} is not in "
                            "its row")


def doc_sections(text):
    """{heading text: [(row name, whole row)]} of a Markdown file; a row belongs to the nearest
    heading above it."""
    out, current = {}, None
    in_fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        h = HEADING.match(line)
        if h:
            current = h.group(2).strip("` ")
            out.setdefault(current, [])
            continue
        r = ROW.match(line)
        if r and current is not None:
            for name in re.findall(r"`([^`]+)`", r.group(1)):
                out[current].append((name.strip(), line))
    return out


def compare(where, code, rows, problems):
    """code: {name: env or None}; rows: [(name, row)]. Appends what is missing or stale."""
    documented = {}
    for name, row in rows:
        documented.setdefault(name, row)
    for name, env in sorted(code.items()):
        if name not in documented:
            problems.append(f"{where}: {name} is not documented")
        elif env and env not in documented[name]:
            problems.append(f"{where}: {name}: its environment variable {env} is not in its row")
    for name in sorted(set(documented) - set(code)):
        problems.append(f"{where}: {name} is documented but the code has no such name")


def check(repo=REPO):
    problems = []
    flags_doc = doc_sections(read(repo, FLAGS_DOC))
    cli_doc = doc_sections(read(repo, CLI_DOC))
    for binary, sources in BINARIES.items():
        source = ", ".join(sources)
        options = code_options(source_text(repo, binary))
        rows = flags_doc.get(binary)
        if rows is None:
            problems.append(f"{FLAGS_DOC}: no section '{binary}'")
            rows = []
        compare(f"{FLAGS_DOC} ({binary}, from {source})", options.get((), {}), rows, problems)
        compare_defaults(f"{FLAGS_DOC} ({binary}, from {source})", code_defaults(repo, binary), rows,
                         problems)
        if binary != "iscsigwctl":
            continue
        for path, opts in sorted(options.items()):
            if not path:
                continue
            heading = "iscsigwctl " + " ".join(path)
            rows = cli_doc.get(heading)
            if rows is None:
                problems.append(f"{CLI_DOC}: no section '{heading}'")
                continue
            compare(f"{CLI_DOC} ({heading})", opts, rows, problems)
        known = {"iscsigwctl " + " ".join(p) for p in options if p}
        for heading in sorted(cli_doc):
            if heading.startswith("iscsigwctl ") and heading not in known:
                problems.append(f"{CLI_DOC}: section '{heading}': iscsigwctl has no such command")
    families = {}
    for top in SOURCES:
        for base, _, files in os.walk(os.path.join(repo, top)):
            for name in sorted(files):
                if name.endswith((".h", ".cc")):
                    rel = os.path.relpath(os.path.join(base, name), repo)
                    for m in FAMILY.finditer(read(repo, rel)):
                        families[m.group(1)] = None
    rows = [r for section in doc_sections(read(repo, METRICS_DOC)).values() for r in section]
    compare(f"{METRICS_DOC}", families, rows, problems)
    return problems


def self_test():
    """Plants what the check must catch in a copy of the tree; returns the problems it missed."""
    with tempfile.TemporaryDirectory(prefix="iscsigw-check-reference-") as tmp:
        for top in SOURCES + ("docs",):
            shutil.copytree(os.path.join(REPO, top), os.path.join(tmp, top))

        def edit(rel, old, new):
            path = os.path.join(tmp, rel)
            text = read(tmp, rel)
            assert old in text, f"self-test: {rel} no longer holds {old!r}"
            with open(path, "w") as f:
                f.write(text.replace(old, new, 1))

        edit("server/flags.cc", "  try {\n",
             '  app.add_option("--planted-flag", f->state_dir, "x")->envname("ISCSIGW_PLANTED");\n'
             "  try {\n")
        edit("server/ctl/target.cc", 'c->add_option("--alias", a->alias);',
             'c->add_option("--alias", a->alias);\n  c->add_flag("--planted-option", a->allow_any);')
        edit("controlplane/metrics/collectors.cc", '  simple("iscsigw_iscsi_logouts_total"',
             '  simple("iscsigw_planted_total", "x", logouts);\n'
             '  simple("iscsigw_iscsi_logouts_total"')
        edit("server/csi_flags.cc", "  try {\n",
             '  app.set_version_flag("--planted-version", "x");\n  try {\n')
        edit("server/flags.h", "unsigned nop_interval_s = 30;", "unsigned nop_interval_s = 31;")
        with open(os.path.join(tmp, FLAGS_DOC), "a") as f:
            f.write("\n## iscsigw-csi\n\n| `--planted-stale` | gone |\n")
        found = check(tmp)
        expected = ["--planted-flag is not documented", "--planted-option is not documented",
                    "--planted-version is not documented",
                    "iscsigw_planted_total is not documented",
                    "--planted-stale is documented but the code has no such name",
                    "--nop-interval: the code's default 31 is not in its row"]
        missed = [e for e in expected if not any(e in p for p in found)]
        extra = [p for p in found if "planted" not in p and "default 31" not in p]
        return missed, extra


def main():
    if sys.argv[1:] == ["--self-test"]:
        missed, extra = self_test()
        for m in missed:
            print(f"self-test: not caught: {m}")
        for e in extra:
            print(f"self-test: reported beyond the planted names: {e}")
        print(f"reference self-test: {len(missed)} planted name(s) missed")
        return 1 if missed or extra else 0
    if sys.argv[1:]:
        sys.exit(__doc__)
    found = check()
    for p in found:
        print(p)
    print(f"reference: {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
