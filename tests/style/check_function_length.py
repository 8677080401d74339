"""No C++ function of the project is longer than LIMIT lines, from the first line of its
definition to its closing brace: past that a function is usually several jobs, each of which could
be named, split out and tested on its own. Lambdas and local classes count toward the function
that holds them.

The scan matches braces over each source (tests/style/sources.py) after blanking comments, string
and character literals and preprocessor lines. A brace at namespace or class scope opens a
function body when the text before it (since the last `;`, `{` or `}` there) has a parameter list
and is neither a namespace, a class, struct, union or enum, nor an initialiser (`= {`); the braces
of a constructor's member initialisers (`a_{x}`) and of default arguments belong to the definition,
not its body.

ALLOWED lists the justified exceptions, each with its reason and the most lines it may grow to
(None: no ceiling, for a function being split now). Exit 1 listing every function past LIMIT that
is not allowed, every allowed one past its ceiling, and every entry that no longer matches a long
function (remove it: the list only shrinks)."""
import os
import re
import sys

from sources import REPO, cpp_sources

LIMIT = 150

# (path, function) -> (most lines, reason). A function is named as in the report: its qualified
# name as written at the definition (`Connection::HandleLogin`), a gtest case as `Suite.Name`.
ALLOWED = {
    ("controlplane/metrics/collectors.cc", "StatsCollector::Collect"):
        (165, "one metric family after another, declared then filled: a list, not logic"),
    ("dataplane/backing/file/file_store.cc", "FileStore::Open"):
        (162, "validate, open or create, size, direct I/O, rings, journal: one chain on one fd"),
    ("dataplane/iscsi/negotiation.cc", "Negotiator::ProcessOne"):
        (200, "RFC 7143 13: one branch per class of key, in the RFC's order"),
    ("dataplane/iscsi/negotiation.cc", "Rules"):
        (153, "the table of RFC 7143 keys, one entry per key: a table, not logic"),
    ("dataplane/scsi/mode_pages.cc", "ModeSelect"):
        (173, "SPC-4 6.9/6.10: the CDB and each page's fields checked in the standard's order"),
    ("server/flags.cc", "ParseFlags"):
        (158, "the daemon's command-line options, one per flag: a list, not logic"),
    ("server/iscsigwd.cc", "Run"):
        (267, "the daemon's start-up in its order, each step's failure ending it"),
}


class Function:
    def __init__(self, path, name, first, last):
        self.path, self.name, self.first, self.last = path, name, first, last

    @property
    def lines(self):
        return self.last - self.first + 1

    def __repr__(self):
        return f"{self.path}:{self.first}: {self.name}: {self.lines} lines"


def blank(text):
    """text with every comment, string and character literal and preprocessor line replaced by
    spaces, newlines kept (so that offsets keep their line numbers)."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True  # only whitespace since the last newline

    def clear(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            # A directive, with its continuation lines.
            j = i
            while j < n and text[j] != "\n":
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                if text.startswith("/*", j):
                    end = text.find("*/", j + 2)
                    j = n if end < 0 else end + 2
                    continue
                j += 1
            clear(i, j)
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            clear(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            clear(i, j)
            i = j
            continue
        if c == '"':
            # A raw string: R"delim( ... )delim", after an optional u8, u, U or L prefix.
            k = i - 1
            if k >= 0 and text[k] == "R":
                start = k
                while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
                    start -= 1
                if text[start:k] in ("", "u8", "u", "U", "L"):
                    paren = text.find("(", i + 1)
                    delim = text[i + 1:paren]
                    end = text.find(")" + delim + '"', paren)
                    j = n if paren < 0 or end < 0 else end + len(delim) + 2
                    clear(i + 1, j - 1)
                    i = j
                    continue
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            clear(i + 1, min(j, n))
            i = j + 1
            continue
        if c == "'":
            # A digit separator (1'000'000) when the token before it began with a digit.
            start = i
            while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "_'."):
                start -= 1
            if start < i and text[start].isdigit():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'" and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            clear(i + 1, min(j, n))
            i = j + 1
            continue
        i += 1
    return "".join(out)


TEMPLATE = re.compile(r"^template\s*<")
ACCESS = re.compile(r"^(?:(?:public|private|protected)\s*:(?!:)\s*)+")
ATTRIBUTES = re.compile(r"^(?:\[\[.*?\]\]\s*)+")
GTEST = ("TEST", "TEST_F", "TEST_P", "TYPED_TEST", "TYPED_TEST_P")


def strip_template(header):
    """header without a leading `template <...>` (nested angle brackets included)."""
    while True:
        m = TEMPLATE.match(header)
        if not m:
            return header
        depth = 0
        for k in range(m.end() - 1, len(header)):
            if header[k] == "<":
                depth += 1
            elif header[k] == ">":
                depth -= 1
                if depth == 0:
                    header = header[k + 1:].lstrip()
                    break
        else:
            return header


def top_level(header):
    """header with each parenthesised group emptied to `()`."""
    out = []
    depth = 0
    for c in header:
        if c == "(":
            if depth == 0:
                out.append("(")
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                out.append(")")
        elif depth == 0:
            out.append(c)
    return "".join(out)


def classify(header):
    """What a brace at namespace or class scope opens, from the text before it: 'namespace',
    'class', 'function' or 'other' (an initialiser, an enum's body)."""
    h = ACCESS.sub("", header.strip())
    h = ATTRIBUTES.sub("", h)
    h = strip_template(h)
    words = h.split()
    first = words[0] if words else ""
    if first in ("namespace", "inline") and "namespace" in words[:2]:
        return "namespace"
    if first == "extern" and len(words) <= 2 and "(" not in h:
        return "namespace"  # extern "C" {
    if first in ("class", "struct", "union"):
        return "class"
    if first == "typedef" and len(words) > 1 and words[1] in ("struct", "class", "union"):
        return "class"
    if first == "enum":
        return "other"
    flat = top_level(h)
    if "(" not in flat:
        return "other"
    flat = re.sub(r"operator\s*(?:\(\)|[^\s\w(]+)", "operator", flat)
    flat = re.sub(r"[=!<>]=", " ", flat)
    if "=" in flat.split("(", 1)[0]:
        return "other"  # auto f = [](...) {, Foo x = Bar(...) {
    return "function"


def function_name(header):
    h = strip_template(ATTRIBUTES.sub("", ACCESS.sub("", header.strip())))
    m = re.search(r"((?:\w+(?:<[^()]*?>)?::)*(?:operator\s*(?:\(\)|[^\s\w(]+|\s\w+)|~?\w+))\s*\(",
                  h)
    if not m:
        return " ".join(h.split())[:60]
    name = m.group(1)
    if name in GTEST:
        args = h[m.end():].split(")", 1)[0]
        parts = [a.strip() for a in args.split(",")]
        if len(parts) >= 2:
            return f"{parts[0]}.{parts[1]}"
    return re.sub(r"\s+", " ", name)


def is_constructor_init(header):
    """A header whose parameter list is followed by a member initialiser list (`) : a_(x)`)."""
    flat = top_level(ACCESS.sub("", header.strip()))
    return re.search(r"\)[^:;]*?(?<!:):(?!:)", flat) is not None


def functions(path, text):
    """The function definitions of one source."""
    clean = blank(text)
    found = []
    # Each open brace: [kind, first line, name]. Kinds: namespace, class (functions may start in
    # them), function, other (skipped whole), inner (belongs to the header being read).
    stack = []
    header = []
    header_line = None
    line = 1
    paren = 0

    def scope():
        for kind, _, _ in reversed(stack):
            if kind != "inner":
                return kind
        return "namespace"

    for c in clean:
        if c == "\n":
            line += 1
        if scope() not in ("namespace", "class"):
            # Inside a function or an initialiser: only the braces matter.
            if c == "{":
                stack.append(["nested", line, None])
            elif c == "}":
                kind, first, name = stack.pop()
                if kind == "function":
                    found.append(Function(path, name, first, line))
                    header, header_line, paren = [], None, 0
                elif kind == "other":
                    header, header_line, paren = [], None, 0
            continue
        if c == "{":
            text_before = "".join(header)
            if stack and stack[-1][0] == "inner" or paren > 0:
                stack.append(["inner", line, None])
                header.append("{")
                continue
            kind = classify(text_before)
            if kind == "function" and is_constructor_init(text_before):
                last = text_before.rstrip()[-1:]
                if last and (last.isalnum() or last in "_>"):
                    # A member's brace initialiser: a_{x}.
                    stack.append(["inner", line, None])
                    header.append("{")
                    continue
            stack.append([kind, header_line or line,
                          function_name(text_before) if kind == "function" else None])
            header, header_line, paren = [], None, 0
        elif c == "}":
            if not stack:
                continue  # unbalanced (a brace in an #if branch): keep going
            kind, first, name = stack.pop()
            if kind == "inner":
                header.append("}")
            else:
                header, header_line, paren = [], None, 0
        elif c == ";" and not (stack and stack[-1][0] == "inner") and paren == 0:
            header, header_line, paren = [], None, 0
        elif c == ":" and ACCESS.fullmatch("".join(header).strip() + ":"):
            header, header_line, paren = [], None, 0  # public:
        else:
            if c == "(":
                paren += 1
            elif c == ")":
                paren = max(0, paren - 1)
            if header_line is None and not c.isspace():
                header_line = line
            if header_line is not None:
                header.append(c)
    return found


def long_functions(repo=REPO, limit=LIMIT):
    out = []
    for rel in cpp_sources(repo):
        with open(os.path.join(repo, rel), errors="replace") as f:
            text = f.read()
        out += [fn for fn in functions(rel, text) if fn.lines > limit]
    return out


def check(repo=REPO, limit=LIMIT, allowed=None):
    """The problems, one line each: an empty list passes."""
    allowed = ALLOWED if allowed is None else allowed
    problems = []
    seen = set()
    for fn in long_functions(repo, limit):
        key = (fn.path, fn.name)
        if key not in allowed:
            problems.append(f"{fn}, past {limit}: split it by job, or (rarely) add it to ALLOWED "
                            "in tests/style/check_function_length.py with its reason")
            continue
        seen.add(key)
        most, _ = allowed[key]
        if most is not None and fn.lines > most:
            problems.append(f"{fn}, past the {most} it is allowed")
    for key in sorted(set(allowed) - seen):
        problems.append(f"{key[0]}: {key[1]}: no longer past {limit} lines (or gone): remove its "
                        "ALLOWED entry")
    return problems


def main():
    if "--list" in sys.argv[1:]:
        for fn in sorted(long_functions(), key=lambda f: -f.lines):
            print(fn)
        return 0
    problems = check()
    for p in problems:
        print(p)
    print(f"function length: {len(problems)} problem(s), {len(ALLOWED)} allowed past {LIMIT} lines")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
